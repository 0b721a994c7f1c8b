"""A hub dataset of one's own, declared in the config (``tasks.<name>.hub``): checked at config time (every error names
its key path), fetched through the real `datasets` library from local folders in the hub's layout (a ClassLabel
dataset and a string-label dataset; the commit resolver is faked: no network) into the same cache and lock file as
the published tasks, built by the one generic builder, split, and counted by `anyjev plan` before and after fetching.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import datasets
import pytest
import yaml

import anyjev.data.hub as hub
from anyjev.config import validate_config
from anyjev.data.declared import HubTaskDeclaration, declaration_from_data
from anyjev.data.hub import FetchJob
from anyjev.data.prepare import PrepareJob, build_task, prepare_task
from anyjev.data.taskfile import load_task_file
from anyjev.errors import ConfigError, TaskDataError
from anyjev.plan import plan_config, plan_text
from anyjev.settings import Settings
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO
from tests.hub_repos import OFFLINE_COMMIT, go_offline, write_hub_repo
from tests.published_hub_cases import write_case, written_cases

SENTIMENT = ["negative", "neutral", "positive"]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    go_offline(monkeypatch, tmp_path)


def classlabel_repo(root: Path) -> Path:
    """A sentiment dataset with a ClassLabel label (ids 0..2 named by SENTIMENT), and a title and a body."""
    features = datasets.Features({"title": datasets.Value("string"), "body": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=SENTIMENT)})
    train = {"title": [f"T{i}" for i in range(12)], "body": [f"body {i}" for i in range(12)], "label": [i % 3 for i in range(12)]}
    test = {"title": ["Great", "Awful", "Fine", "Meh"], "body": ["loved it", "hated it", "it was ok", "  x  "],
            "label": [2, 0, 1, 1]}
    return write_hub_repo(root, {"train": train, "test": test}, features)


def string_label_repo(root: Path) -> Path:
    """A spam dataset whose label is a string (no ClassLabel), config en, with a test and a validation split."""
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.Value("string")})
    return write_hub_repo(root, {"test": {"text": [f"msg {i}" for i in range(6)], "label": ["spam", "ham", "ham", "spam", "ham", "ham"]},
                                 "validation": {"text": [f"val {i}" for i in range(4)], "label": ["ham", "spam", "ham", "ham"]}},
                          features, "en")


def config(tasks: dict, **extra) -> dict:
    return validate_config({"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                            "tasks": tasks, "published": None, "server": {"python": sys.executable}} | extra, workdir=REPO)


SENTIMENT_TASK = {"source": "hub", "n_test": 2, "n_calib": 2, "hub": {
    "dataset": "someone/reviews", "revision": "main", "splits": ["test"], "text_template": "{title}: {body}",
    "label_field": "label", "question": "What is the sentiment of this review?", "kind": "choice",
    "option_names": {"neutral": "mixed or neutral"}}}
SPAM_TASK = {"source": "hub", "n_test": 4, "n_calib": 2, "allow_fewer": False, "hub": {
    "dataset": "someone/spam", "config": "en", "revision": "v1", "test_split": "test", "calib_split": "validation",
    "text_field": "text", "label_field": "label", "question": "Is this message spam?", "kind": "noul", "yes_labels": ["spam"]}}


def fetch_and_prepare(settings: Settings, task: str, repo: Path) -> tuple[Path, object]:
    """The workflow's two steps for TASK: its fetch job (reading REPO instead of the hub), then its prepare job."""
    dataset = settings.prepare_job(task, hub_cache="resources/hub").dataset
    job = settings.fetch_job(dataset, lock_record="resources/lock.yaml")
    assert FetchJob.from_json(job.to_json()) == job
    folder = hub.fetch(dataset, "resources/hub", dataset=job.hub, lock=job.lock, source=repo)
    prepare = settings.prepare_job(task, hub_cache="resources/hub")
    assert PrepareJob.from_json(prepare.to_json()) == prepare  # the declaration survives the job's JSON argument
    return folder, prepare_task(prepare, f"resources/tasks/{task}.jsonl")


# ------------------------------------------------------------------------------------------ through `datasets`


def test_a_classlabel_dataset(offline, tmp_path: Path) -> None:
    settings = Settings.from_config(config({"reviews": SENTIMENT_TASK}))
    assert settings.hub_datasets()["reviews"].splits == ("test",)
    folder, task = fetch_and_prepare(settings, "reviews", classlabel_repo(tmp_path / "repo"))
    meta = json.loads((folder / "meta.json").read_text())
    assert folder == Path("resources/hub/reviews") and meta["label_names"] == {"label": SENTIMENT}  # recorded: offline build
    assert (meta["dataset"], meta["revision"], meta["resolved_sha"]) == ("someone/reviews", "main", OFFLINE_COMMIT)
    lock = yaml.safe_load(Path("resources/lock.yaml").read_text())["datasets"]
    assert lock["someone/reviews"]["commit"] == OFFLINE_COMMIT and lock["someone/reviews"]["revision"] == "main"
    built = build_task(settings.prepare_job("reviews", hub_cache="resources/hub"))
    q = built.items[0].question
    assert q.kind == "choice" and q.text == "What is the sentiment of this review?"
    assert q.options == ("negative", "mixed or neutral", "positive")  # ClassLabel order, a readable name for one
    assert [(it.id, it.state, q.options[it.gold]) for it in built.items] == [
        ("test-0", "Great: loved it", "positive"), ("test-1", "Awful: hated it", "negative"),
        ("test-2", "Fine: it was ok", "mixed or neutral"), ("test-3", "Meh:   x  ", "mixed or neutral")]
    assert built.source["dataset"] == "someone/reviews" and built.source["resolved_sha"] == OFFLINE_COMMIT
    # the task file: 2 test + 2 calibration items by the seeded split of the one hub split
    assert [it.split for it in task.items] == ["test"] * 2 + ["calib"] * 2
    assert load_task_file("resources/tasks/reviews.jsonl").items == task.items


def test_a_string_label_dataset_from_two_splits(offline, tmp_path: Path) -> None:
    settings = Settings.from_config(config({"spam": SPAM_TASK}))
    folder, task = fetch_and_prepare(settings, "spam", string_label_repo(tmp_path / "repo"))
    assert json.loads((folder / "meta.json").read_text())["label_names"] == {}  # no ClassLabel: the strings are the names
    built = build_task(settings.prepare_job("spam", hub_cache="resources/hub"))
    assert built.items[0].question.kind == "noul" and built.items[0].question.options == ("Yes", "No")
    # test items from the hub's test split, calibration items from its validation split, each marked
    assert [(it.id, it.split, it.gold) for it in built.items] == [
        ("test-0", "test", 0), ("test-1", "test", 1), ("test-2", "test", 1), ("test-3", "test", 0), ("test-4", "test", 1),
        ("test-5", "test", 1), ("validation-0", "calib", 1), ("validation-1", "calib", 0), ("validation-2", "calib", 1),
        ("validation-3", "calib", 1)]
    # the seeded split keeps the marks: n_test of the test split, n_calib of the validation split
    assert sorted((it.id.split("-")[0], it.split) for it in task.items) == [("test", "test")] * 4 + [("validation", "calib")] * 2
    lock = yaml.safe_load(Path("resources/lock.yaml").read_text())["datasets"]["someone/spam"]
    assert (lock["revision"], lock["commit"], lock["config"]) == ("v1", OFFLINE_COMMIT, "en")
    # asking for more calibration items than the validation split has is refused (allow_fewer: false)
    more = Settings.from_config(config({"spam": copy.deepcopy(SPAM_TASK) | {"n_calib": 5}}))
    with pytest.raises(TaskDataError, match=r"someone/spam:split: only 4 items are marked 'calib', fewer than tasks\.spam\.n_calib = 5 "
                       r"\(tasks\.spam\.allow_fewer: true keeps them\)"):
        prepare_task(more.prepare_job("spam", hub_cache="resources/hub"), "x.jsonl")


# ----------------------------------------------------------------------------------- the builder, on cached rows


def write_rows(root: Path, name: str, d: HubTaskDeclaration, splits: dict[str, list[dict]], label_names: dict | None = None) -> Path:
    """<root>/<name> as fetch writes it for declaration D."""
    folder = root / name
    folder.mkdir(parents=True)
    meta = {"task": name, "dataset": d.dataset, "config": d.config, "revision": d.revision, "resolved_sha": None,
            "datasets_version": None, "splits": {}, "label_names": label_names or {}}
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def declared(**keys) -> HubTaskDeclaration:
    base = {"dataset": "org/data", "revision": "main", "splits": ["test"], "text_field": "text", "label_field": "label",
            "question": "Which?", "kind": "choice"}
    return declaration_from_data({k: v for k, v in (base | keys).items() if v is not None}, "tasks.t.hub")


def build(tmp_path: Path, d: HubTaskDeclaration, splits: dict[str, list[dict]], label_names: dict | None = None):
    return hub.build("t", write_rows(tmp_path, "t", d, splits, label_names), revision=d.revision, declared=d)


def test_one_split_or_two(tmp_path: Path) -> None:
    rows = {"train": [{"text": "a", "label": "x"}, {"text": "b", "label": "y"}], "test": [{"text": "c", "label": "y"}]}
    one = build(tmp_path / "1", declared(splits=["train", "test"]), rows)
    assert [(it.id, it.split) for it in one.items] == [("train-0", None), ("train-1", None), ("test-0", None)]
    two = build(tmp_path / "2", declared(splits=None, test_split="test", calib_split="train"), rows)
    assert [(it.id, it.split) for it in two.items] == [("test-0", "test"), ("train-0", "calib"), ("train-1", "calib")]
    assert declared(splits=None, test_split="test", calib_split="train").hub_splits == ("test", "train")


def test_keep_the_most_frequent_labels(tmp_path: Path) -> None:
    train = [{"text": "t", "label": lab} for lab, n in (("d", 5), ("a", 3), ("c", 3), ("b", 3), ("e", 1)) for _ in range(n)]
    test = [{"text": f"q{lab}", "label": lab} for lab in "abcde"]
    d = declared(keep_most_frequent=3, frequency_split="train")
    assert d.hub_splits == ("train", "test") and d.k() == (3, "keep_most_frequent")
    t = build(tmp_path / "s", d, {"train": train, "test": test})
    # d (5), then the tie at 3 goes to the names sorted first (a, b); options in label order
    assert t.items[0].question.options == ("a", "b", "d")
    assert [(it.id, t.items[0].question.options[it.gold]) for it in t.items] == [("test-0", "a"), ("test-1", "b"), ("test-3", "d")]
    # integer labels: a tie goes to the lower id; without frequency_split the item splits are counted
    ints = [{"text": "t", "label": lab, "label_text": f"name_{lab}"} for lab in (4, 4, 2, 2, 7, 7, 1)]
    t = build(tmp_path / "i", declared(keep_most_frequent=2, label_text_field="label_text", option_replace={"_": " "}), {"test": ints})
    assert t.items[0].question.options == ("name 2", "name 4") and len(t.items) == 4
    with pytest.raises(TaskDataError, match=r"only 4 labels in split\(s\) \['test'\], keep_most_frequent needs 5"):
        build(tmp_path / "few", declared(keep_most_frequent=5, label_text_field="label_text"), {"test": ints})


def test_text_length_and_strip(tmp_path: Path) -> None:
    rows = [{"text": t, "label": "x" if i % 2 else "y"} for i, t in enumerate(["  short  ", "  " + "l" * 12 + "  ", "m" * 8])]
    t = build(tmp_path / "a", declared(strip=True, min_chars=8, max_chars=10), {"test": rows})
    assert [(it.id, it.state) for it in t.items] == [("test-1", "l" * 10), ("test-2", "m" * 8)]
    t = build(tmp_path / "b", declared(min_chars=9), {"test": rows})  # not stripped: "  short  " has 9 characters
    assert [it.state for it in t.items] == ["  short  ", "  " + "l" * 12 + "  "]


def test_a_template_over_several_fields(tmp_path: Path) -> None:
    rows = [{"question": "Is it?", "passage": "It is.", "label": "yes", "idx": 3, "the-title": "T"}]
    d = declared(text_field=None, text_template="{the-title}. Passage: {passage}\nQuestion: {question} {{verbatim}}", kind="noul",
                 yes_labels=["yes"])
    t = build(tmp_path / "a", d, {"test": rows})
    assert t.items[0].state == "T. Passage: It is.\nQuestion: Is it? {verbatim}" and t.items[0].gold == 0
    with pytest.raises(TaskDataError, match=r"line 1: missing column 'passage'"):
        build(tmp_path / "b", d, {"test": [{"question": "q", "label": "yes", "the-title": "T"}]})
    with pytest.raises(TaskDataError, match=r"line 1: column 'question' = 3 has an unexpected type"):
        build(tmp_path / "c", d, {"test": [{"question": 3, "passage": "p", "label": "yes", "the-title": "T"}]})


def test_label_names_and_readable_options(tmp_path: Path) -> None:
    rows = [{"text": "a", "label": 1}, {"text": "b", "label": 0}]
    # names given for integer labels, in id order; readable names for some
    d = declared(label_names=["very_bad", "very_good"], option_names={"very_good": "Good"}, option_replace={"_": " ", "very": "really"})
    t = build(tmp_path / "given", d, {"test": rows})
    assert t.items[0].question.options == ("really bad", "Good") and [it.gold for it in t.items] == [1, 0]
    # a ClassLabel's names recorded at fetch time name the ids; given names must agree with them
    t = build(tmp_path / "recorded", declared(), {"test": rows}, {"label": ["neg", "pos"]})
    assert t.items[0].question.options == ("neg", "pos")
    with pytest.raises(TaskDataError, match="ClassLabel 'label' names its labels \\['neg', 'pos'\\], but .* label_names"):
        build(tmp_path / "disagree", declared(label_names=["pos", "neg"]), {"test": rows}, {"label": ["neg", "pos"]})
    # integer labels without any names cannot be options
    with pytest.raises(TaskDataError, match="line 2: label 0 has no name: the options of a declared task are its label "
                                            "names, unless options_field .*; give label_names, label_text_field"):
        build(tmp_path / "unnamed", declared(), {"test": rows})
    # a score question: the labels are the ordered levels
    t = build(tmp_path / "score", declared(kind="score", label_names=["low", "mid", "high"]), {"test": [{"text": "x", "label": 2}]})
    assert t.items[0].question.kind == "score" and t.items[0].question.options == ("low", "mid", "high")
    # too many labels for a choice, known only from the data
    many = [{"text": "x", "label": i} for i in range(30)]
    with pytest.raises(TaskDataError, match="30 labels, but a choice question has 2 to 26 options: set keep_most_frequent"):
        build(tmp_path / "many", declared(), {"test": many}, {"label": [f"l{i}" for i in range(30)]})


def test_a_float_label_column_reads_whole_numbers_and_names_the_row_that_is_not_one(tmp_path: Path) -> None:
    """pandas stores an integer column with a missing value as floats: 0.0 and 1.0 are the label ids 0 and 1, and a
    NaN (or a fraction) is named at its own row, not at the first row of the column."""
    names = ["neg", "pos"]
    rows = [{"text": "a", "label": 1.0}, {"text": "b", "label": 0.0}, {"text": "c", "label": 1}]
    assert [it.gold for it in build(tmp_path / "whole", declared(label_names=names), {"test": rows}).items] == [1, 0, 1]
    for name, value, why in (("nan", float("nan"), "a missing value (NaN)"), ("half", 0.5, "not a whole number")):
        bad = [*rows, {"text": "d", "label": value}]
        with pytest.raises(TaskDataError) as info:
            build(tmp_path / name, declared(label_names=names), {"test": bad})
        assert str(info.value) == (f"{tmp_path / name / 't' / 'test.jsonl'}:line 4: label {value!r} (column 'label') is "
                                   f"{why}, not a label id or name")


def test_yes_and_no_labels(tmp_path: Path) -> None:
    rows = [{"text": t, "label": lab} for t, lab in (("a", "pos"), ("b", "neg"), ("c", "neutral"))]
    yes = build(tmp_path / "y", declared(kind="noul", yes_labels=["pos"]), {"test": rows})
    assert [it.gold for it in yes.items] == [0, 1, 1]  # every other label means No
    no = build(tmp_path / "n", declared(kind="noul", no_labels=["neg"]), {"test": rows})
    assert [it.gold for it in no.items] == [0, 1, 0]  # every other label means Yes
    both = build(tmp_path / "b", declared(kind="noul", yes_labels=["pos"], no_labels=["neg"]), {"test": rows})
    assert [(it.id, it.gold) for it in both.items] == [("test-0", 0), ("test-1", 1)]  # neutral: in neither, dropped
    with pytest.raises(TaskDataError, match="'positive' is not one of the dataset's label names"):
        build(tmp_path / "r", declared(kind="noul", yes_labels=["positive"]), {"test": [{"text": "a", "label": 0}]},
              {"label": ["negative", "pos"]})
    # ids named by label_ids when the dataset records no names (clinc_escalate's "oos" at 42)
    ids = build(tmp_path / "i", declared(kind="noul", no_labels=["oos"], label_ids={"oos": 42}),
                {"test": [{"text": "a", "label": 42}, {"text": "b", "label": 7}]})
    assert [it.gold for it in ids.items] == [1, 0]


def test_the_published_format_is_the_configs(tmp_path: Path) -> None:
    """A published task's entry, copied into a config under `hub:`, makes the same items from the same cache."""
    entry = yaml.safe_load((REPO / "anyjev" / "data" / "published_tasks.yaml").read_text())["banking20"]
    settings = Settings.from_config(config({"mine": {"source": "hub", "hub": entry}}))
    case = next(c for c in written_cases() if c.name == "banking20")
    write_case(tmp_path, case)
    (tmp_path / "mine").symlink_to(tmp_path / "banking20")
    mine = build_task(settings.prepare_job("mine", hub_cache=str(tmp_path)))
    assert settings.tasks["mine"].hub == hub.declaration("banking20")
    assert mine.items == hub.build("banking20", tmp_path / "banking20").items


# ------------------------------------------------------------------------------------------------ config errors


def refused(tasks: dict, key_path: str, words: str = "", **extra) -> None:
    with pytest.raises(ConfigError) as info:
        config(tasks, **extra)
    assert info.value.key_path == key_path, str(info.value)
    assert str(info.value).startswith(f"config key {key_path}: ") and words in str(info.value), str(info.value)


def with_hub(**keys) -> dict:
    task = copy.deepcopy(SENTIMENT_TASK)
    for key, value in keys.items():
        if value is None:
            task["hub"].pop(key, None)
        else:
            task["hub"][key] = value
    return {"t": task}


@pytest.mark.parametrize(("keys", "key_path", "words"), [
    ({"label_field": None}, "tasks.t.hub.label_field", "required"),
    ({"revision": None}, "tasks.t.hub.revision", "required"),
    ({"lable_field": "label"}, "tasks.t.hub.lable_field", "unknown key"),
    ({"kind": "yesno"}, "tasks.t.hub.kind", "'yesno' is not one of"),
    ({"label_names": ["a", 2]}, "tasks.t.hub.label_names.1", "not of type 'string'"),
    ({"keep_most_frequent": 30}, "tasks.t.hub.keep_most_frequent", "maximum of 26"),
    ({"label_ids": {"oos": "42"}}, "tasks.t.hub.label_ids.oos", "not of type 'integer'"),
    ({"splits": None}, "tasks.t.hub.splits", "give splits, or test_split and calib_split"),
    ({"test_split": "validation"}, "tasks.t.hub.splits", "not both"),
    ({"splits": None, "test_split": "test"}, "tasks.t.hub.calib_split", "required"),
    ({"splits": None, "test_split": "test", "calib_split": "test"}, "tasks.t.hub.calib_split", "is the test split 'test' too"),
    ({"text_field": "body"}, "tasks.t.hub.text_field", "not both"),
    ({"text_template": None}, "tasks.t.hub.text_field", "give either text_field"),
    ({"text_template": "{title.upper}"}, "tasks.t.hub.text_template", "{title.upper} is not a column name in braces"),
    ({"text_template": "{title!r}"}, "tasks.t.hub.text_template", "{title!r} is not a column name"),
    ({"text_template": "{body:>20}"}, "tasks.t.hub.text_template", "{body:>20} is not a column name"),
    ({"text_template": "{} and {body}"}, "tasks.t.hub.text_template", "{} is not a column name"),
    ({"text_template": "{0}"}, "tasks.t.hub.text_template", "{0} is not a column name"),
    ({"text_template": "{body[0]}"}, "tasks.t.hub.text_template", "{body[0]} is not a column name"),
    ({"text_template": "no columns"}, "tasks.t.hub.text_template", "names no column in braces"),
    ({"text_template": "{title"}, "tasks.t.hub.text_template", "is not a template"),
    ({"min_chars": 50, "max_chars": 10}, "tasks.t.hub.min_chars", "more than max_chars 10"),
    ({"frequency_split": "train"}, "tasks.t.hub.frequency_split", "set keep_most_frequent"),
    ({"label_names": [f"l{i}" for i in range(27)]}, "tasks.t.hub.label_names", "at most 26 options"),
    ({"kind": "score", "label_names": [f"l{i}" for i in range(11)]}, "tasks.t.hub.label_names", "at most 10 options"),
    ({"kind": "score", "keep_most_frequent": 3}, "tasks.t.hub.keep_most_frequent", "applies to kind choice"),
    ({"label_names": ["a", "b"], "keep_most_frequent": 3}, "tasks.t.hub.keep_most_frequent", "more than the 2 label_names"),
    ({"yes_labels": ["positive"]}, "tasks.t.hub.yes_labels", "applies to kind noul"),
    ({"kind": "noul", "option_names": {}}, "tasks.t.hub.yes_labels", "kind noul needs the labels that mean Yes"),
    ({"kind": "noul", "yes_labels": ["x"]}, "tasks.t.hub.option_names", "a noul question's options are Yes and No"),
    ({"kind": "noul", "option_names": {}, "yes_labels": ["x"], "no_labels": ["x"]}, "tasks.t.hub.no_labels", "in yes_labels too"),
    ({"kind": "noul", "option_names": {}, "label_names": ["a", "b"], "yes_labels": ["c"]}, "tasks.t.hub.yes_labels",
     "'c' is not one of label_names"),
    ({"label_names": ["a", "b"]}, "tasks.t.hub.option_names", "'neutral' is not one of label_names"),
    ({"label_names": ["a", "neutral"], "label_ids": {"a": 1}}, "tasks.t.hub.label_ids", "remove one"),
])
def test_every_declaration_error_names_its_key_path(keys: dict, key_path: str, words: str) -> None:
    refused(with_hub(**keys), key_path, words)


def test_config_errors_around_the_declaration() -> None:
    file_task = copy.deepcopy(SENTIMENT_TASK) | {"source": "file", "path": "tests/data/tiny.jsonl"}
    refused({"t": file_task}, "tasks.t.hub", "source is 'file'")
    refused({"t": copy.deepcopy(SENTIMENT_TASK) | {"builtin": "banking20"}}, "tasks.t.builtin", "remove one")
    refused({"t": copy.deepcopy(SENTIMENT_TASK) | {"revision": "v2"}}, "tasks.t.revision", "tasks.t.hub.revision")
    refused({"t": {"source": "hub"}}, "tasks.t", "no published hub task 't'")
    refused({"t": {"source": "hub", "builtin": "bankin20"}}, "tasks.t.builtin", "no published hub task 'bankin20'")
    # one revision per hub dataset (the lock records one commit per hub id), one dataset per cache folder
    other = copy.deepcopy(SENTIMENT_TASK)
    other["hub"]["revision"] = "v2"
    refused({"t": SENTIMENT_TASK, "u": other}, "tasks.u.hub.revision", "is also fetched at revision 'main' for task 't'")
    banking = copy.deepcopy(SENTIMENT_TASK)
    refused({"banking20": banking, "b": {"source": "hub", "builtin": "banking20"}}, "tasks.b",
            "is fetched into resources/hub/banking20, where task 'banking20' fetches 'someone/reviews'")
    refused({"a": {"source": "hub", "builtin": "injection", "revision": "v2"}, "b": {"source": "hub", "builtin": "injection"}},
            "tasks.b", "also fetched at revision 'v2' for task 'a': one dataset, one revision")
    # K known from the declaration: a choice among more labels than the server returns log-probs for
    refused(with_hub(label_names=[f"l{i}" for i in range(20)], option_names={}), "server.max_logprobs", "items with 20 options",
            server={"python": sys.executable, "max_logprobs": 10})


def test_a_published_declaration_is_checked_like_the_configs() -> None:
    entry = yaml.safe_load((REPO / "anyjev" / "data" / "published_tasks.yaml").read_text())["injection"]
    with pytest.raises(ConfigError, match=r"config key anyjev/data/published_tasks.yaml: injection\.yes_labels: "
                                          r"'spam' is not one of label_names"):
        declaration_from_data(entry | {"yes_labels": ["spam"]}, "anyjev/data/published_tasks.yaml: injection")
    assert declaration_from_data(entry, "x") == hub.declaration("injection")


# ---------------------------------------------------------------------------------------------------- anyjev plan


def test_plan_counts_a_declared_task_before_and_after_fetching(offline, tmp_path: Path) -> None:
    spam = copy.deepcopy(SPAM_TASK)
    reviews = copy.deepcopy(SENTIMENT_TASK)
    reviews["hub"]["label_names"] = SENTIMENT  # K known from the declaration
    reviews |= {"allow_fewer": False}
    unknown = copy.deepcopy(SENTIMENT_TASK)  # K from the ClassLabel: unknown until fetched
    unknown["hub"]["dataset"] = "someone/reviews"
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                                    "tasks": {"spam": spam, "reviews": reviews, "unknown": unknown}, "published": None}))
    before = plan_config(path, models_dir="resources/models", hub_cache="resources/hub")
    cells = {c["task"]: c for c in before["cells"]}
    assert cells["spam"]["estimate"].endswith("K = 2 (noul) from the declaration (Yes/No)")
    assert "K = 3 (choice) from the declaration (label_names)" in cells["reviews"]["estimate"]
    assert (cells["unknown"]["items"], cells["unknown"]["layouts"], cells["unknown"]["prompts"]) == (4, None, None)
    assert "K unknown (choice: the label names come from the data)" in cells["unknown"]["estimate"]
    assert before["total"]["cells_without_prompts"] == 1
    assert before["total"]["prompts"] == cells["spam"]["prompts"] + cells["reviews"]["prompts"]
    text = plan_text(before)
    assert "n/a (K unknown)" in text and "(+ 1 cell(s) n/a)" in text
    for task, repo in (("spam", string_label_repo(tmp_path / "spam-repo")), ("reviews", classlabel_repo(tmp_path / "reviews-repo")),
                       ("unknown", tmp_path / "reviews-repo")):
        fetch_and_prepare(Settings.load(path), task, repo)
    after = {c["task"]: c for c in plan_config(path, models_dir="resources/models", hub_cache="resources/hub")["cells"]}
    for task in ("spam", "reviews"):
        assert after[task]["estimate"] is None and after[task]["prompt_tokens"] > 0
        for key in ("items", "n_test", "n_calib", "layouts", "layouts_per_item", "prompts"):
            assert after[task][key] == cells[task][key], (task, key)
    assert after["unknown"]["estimate"] is None and after["unknown"]["layouts_per_item"] == [6, 6]  # K = 3, both groups
    assert after["unknown"]["prompts"] == 4 * 6 and after["unknown"]["items"] == 4


# ----------------------------------------------------------------------------------------------------- the docs


def test_the_documented_examples_are_valid_and_every_key_is_documented(tmp_path: Path) -> None:
    """Every declaration in the docs is a valid config (a local folder's example, where its folder exists); the sst2
    example is in both documents; config/README.md's table documents every key."""
    import re

    from anyjev.data.local import is_local
    from anyjev.schema import schema_node

    examples = []
    for doc in ("docs/configuration.md", "config/README.md"):
        blocks = re.findall(r"```yaml\n(.*?)```", (REPO / doc).read_text(encoding="utf-8"), re.S)
        examples += [(doc, yaml.safe_load(b)) for b in blocks if "hub:" in b]
    sst2 = []
    for doc, example in examples:
        [(name, entry)] = example["tasks"].items()
        local = is_local(entry["hub"]["dataset"])
        if local:
            (tmp_path / entry["hub"]["dataset"]).mkdir(parents=True, exist_ok=True)
        settings = Settings.from_config(validate_config(
            {"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
             "tasks": example["tasks"], "published": None, "server": {"python": sys.executable}}, workdir=tmp_path))
        task = settings.tasks[name]
        assert task.hub is not None and settings.hub_datasets()[name].local == local, (doc, name)
        assert (settings.hub_datasets()[name].revision is None) == local, (doc, name)
        if task.hub.dataset == "stanfordnlp/sst2":
            sst2.append(doc)
            assert task.hub.kind == "noul" and settings.hub_datasets()[name].revision == "main"
    assert sst2 == ["docs/configuration.md", "config/README.md"]
    assert any(is_local(e["tasks"][n]["hub"]["dataset"]) for doc, e in examples for n in e["tasks"] if doc == "docs/configuration.md")
    section = (REPO / "config" / "README.md").read_text(encoding="utf-8").split("### A hub dataset of your own")[1]
    table = section.split("### ")[0]
    undocumented = [key for key in schema_node("tasks", "*", "hub")["properties"] if f"`{key}`" not in table]
    assert not undocumented, f"config/README.md does not document tasks.<name>.hub keys {undocumented}"
