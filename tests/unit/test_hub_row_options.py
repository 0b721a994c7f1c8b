"""Hub datasets whose rows give their own options (``tasks.<name>.hub.options_field``): the worked examples of
docs/configuration.md (MMLU, ARC, HellaSwag) fetched through the real `datasets` library from local fixtures with
those datasets' exact schemas (tests/multiple_choice_repos.py; the commit resolver is faked: no network), built and
split as the workflow does; every way of reading the gold; options per row that vary in number; and the one-line
error that names the task, the key and the row for a wrong path or a gold that is not among a row's options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import anyjev.data.hub as hub
from anyjev.config import validate_config
from anyjev.data.declared import declaration_from_data
from anyjev.data.prepare import build_task, prepare_task
from anyjev.errors import ConfigError, TaskDataError
from anyjev.plan import plan_config
from anyjev.settings import Settings
from tests.conftest import QWEN3_TOKENIZER_DIR, REPO
from tests.hub_repos import go_offline
from tests.multiple_choice_repos import ANSWERS, N_CALIB, N_TEST, REPOS, as_fixture_task, worked_examples


@pytest.fixture
def offline(monkeypatch, tmp_path):
    go_offline(monkeypatch, tmp_path)


def config(tasks: dict, **extra) -> dict:
    return validate_config({"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                            "tasks": tasks, "published": None, "server": {"python": sys.executable}} | extra, workdir=REPO)


EXAMPLES = worked_examples()


def test_the_docs_give_the_three_worked_examples() -> None:
    assert sorted(t["hub"]["dataset"] for t in EXAMPLES.values()) == sorted(REPOS)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_worked_example_builds_from_its_fixture(name: str, offline, tmp_path: Path) -> None:
    """The example exactly as the docs declare it (hub id, revision), its data read from the fixture instead of the hub."""
    task = as_fixture_task(EXAMPLES[name], tmp_path, local=False)
    dataset = task["hub"]["dataset"]
    settings = Settings.from_config(config({name: task}))
    folder = settings.hub_folders()[name]
    job = settings.fetch_job(folder, lock_record="resources/lock.yaml")
    hub.fetch(folder, "resources/hub", dataset=job.hub, lock=job.lock, source=REPOS[dataset](tmp_path / "repo"))
    prepare = settings.prepare_job(name, hub_cache="resources/hub")
    built = build_task(prepare)
    answers = ANSWERS[dataset]
    assert [it.id for it in built.items] == list(answers)  # every row, in hub order
    for it in built.items:
        assert it.question.options[it.gold] == answers[it.id], it.id
    assert built.prior_group == "task" and len({it.question.key() for it in built.items}) == len(built.items)
    written = prepare_task(prepare, f"resources/tasks/{name}.jsonl")
    assert sum(it.split == "test" for it in written.items) == N_TEST and sum(it.split == "calib" for it in written.items) == N_CALIB
    if dataset == "allenai/ai2_arc":
        assert built.k == "mixed (3-5)"  # rows with 3, 4 and 5 options
        moon = next(it for it in built.items if it.question.text == "What makes the Moon shine?")
        assert moon.question.options[moon.gold] == "reflected sunlight"  # answerKey "2" among the labels 1-4
        assert all(it.state == "" for it in built.items)
    if dataset == "Rowan/hellaswag":
        assert built.items[0].state == "A man lays two slices of bread on a board. he"
        assert built.items[0].question.text == EXAMPLES[name]["hub"]["question"]
    if dataset == "cais/mmlu":
        assert built.items[0].question.text == "What is 2 + 3?" and built.k == 4
        assert sorted({it.gold for it in built.items}) == [0, 1, 2, 3]


# ------------------------------------------------------------------------------------- the builder on cached rows


def declared(**keys):
    base = {"dataset": "org/mc", "revision": "main", "splits": ["test"], "question_field": "q", "options_field": "opts",
            "label_field": "gold", "gold": "index", "kind": "choice"}
    return declaration_from_data({k: v for k, v in (base | keys).items() if v is not None}, "tasks.t.hub")


def build(tmp_path: Path, d, rows: list[dict], name: str = "t"):
    folder = tmp_path / name
    folder.mkdir(parents=True)
    meta = {"task": name, "dataset": d.dataset, "config": d.config, "revision": d.revision, "resolved_sha": None,
            "datasets_version": None, "splits": {}, "label_names": {}}
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "meta.json").write_text(json.dumps(meta))
    return hub.build(name, folder, revision=d.revision, declared=d)


def golds(task) -> list[str]:
    return [it.question.options[it.gold] for it in task.items]


def test_every_way_of_reading_the_gold(tmp_path: Path) -> None:
    opts = ["red", "green", "blue"]
    assert golds(build(tmp_path / "i", declared(), [{"q": "Which?", "opts": opts, "gold": 2}, {"q": "W?", "opts": opts, "gold": "1"}])) \
        == ["blue", "green"]
    assert golds(build(tmp_path / "l", declared(gold="letter"), [{"q": "Which?", "opts": opts, "gold": "B"}])) == ["green"]
    rows = [{"q": "Which?", "c": {"text": opts, "label": ["x", "y", "z"]}, "key": "z"}]
    d = declared(options_field="c.text", option_labels_field="c.label", label_field="key", gold="option_label")
    assert golds(build(tmp_path / "o", d, rows)) == ["blue"]
    rows = [{"q": "Which?", "mc1_targets": {"choices": opts, "labels": [0, 1, 0]}}]  # TruthfulQA's mc1_targets
    d = declared(options_field="mc1_targets.choices", label_field="mc1_targets.labels", gold="marks")
    assert golds(build(tmp_path / "m", d, rows)) == ["green"]
    assert golds(build(tmp_path / "t", declared(gold="text"), [{"q": "Which?", "opts": opts, "gold": "red"}])) == ["red"]
    # a list of structs is read like a struct of lists (the same path)
    rows = [{"q": "Which?", "c": [{"text": o, "label": lab} for o, lab in zip(opts, "ABC", strict=True)], "key": "C"}]
    d = declared(options_field="c.text", option_labels_field="c.label", label_field="key", gold="option_label")
    assert golds(build(tmp_path / "s", d, rows)) == ["blue"]


def test_the_default_gold_and_the_row_state(tmp_path: Path) -> None:
    rows = [{"q": "Which?", "c": {"text": ["a", "b"], "label": ["A", "B"]}, "key": "B", "ctx": " some text "}]
    d = declared(options_field="c.text", option_labels_field="c.label", label_field="key", gold=None, text_field="ctx", strip=True)
    t = build(tmp_path / "a", d, rows)
    assert golds(t) == ["b"] and t.items[0].state == "some text"  # with option labels, the gold is one of them
    t = build(tmp_path / "b", declared(gold=None), [{"q": "Which?", "opts": ["a", "b"], "gold": 1}])
    assert golds(t) == ["b"] and t.items[0].state == ""  # without, an index; no text field: an empty state
    t = build(tmp_path / "c", declared(question_field=None, question="Pick one."), [{"opts": ["a", "b"], "gold": 0}])
    assert t.items[0].question.text == "Pick one."
    t = build(tmp_path / "d", declared(option_replace={"_": " "}), [{"q": "Which?", "opts": ["a_b", "c_d"], "gold": 1}])
    assert t.items[0].question.options == ("a b", "c d") and golds(t) == ["c d"]
    # a question in each row with the label as options (BoolQ's shape): noul, the passage as the state
    d = declared(options_field=None, gold=None, text_field="passage", label_field="answer", kind="noul", yes_labels=["true"])
    t = build(tmp_path / "e", d, [{"q": "Is it?", "passage": "It is.", "answer": "true"}, {"q": "Is it not?", "passage": "No.",
                                                                                            "answer": "false"}])
    assert [(it.question.text, it.state, it.gold) for it in t.items] == [("Is it?", "It is.", 0), ("Is it not?", "No.", 1)]
    assert t.prior_group == "task"  # every item has its own question


def test_option_counts_vary_by_row(tmp_path: Path) -> None:
    rows = [{"q": f"Q{k}?", "opts": [f"o{i}" for i in range(k)], "gold": k - 1} for k in (2, 5, 26)]
    t = build(tmp_path / "a", declared(), rows)
    assert [it.question.k for it in t.items] == [2, 5, 26] and t.k == "mixed (2-26)"


def one_line_error(tmp_path: Path, d, rows: list[dict], *words: str) -> str:
    with pytest.raises(TaskDataError) as info:
        build(tmp_path, d, rows)
    msg = str(info.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


def test_a_wrong_path_or_gold_names_the_task_the_key_and_the_row(tmp_path: Path) -> None:
    arc = [{"q": "First?", "c": {"text": ["a", "b"], "label": ["A", "B"]}, "key": "A"},
           {"q": "Which?", "c": {"text": ["a", "b", "c"], "label": ["A", "B", "C"]}, "key": "E"}]
    keys = {"option_labels_field": "c.label", "label_field": "key", "gold": "option_label"}
    msg = one_line_error(tmp_path / "a", declared(options_field="c.txt", **keys), arc,
                         "task 't'", "row test-0", "hub.options_field", "'c.txt'", "'txt'", "label, text")
    assert msg.startswith(f"{tmp_path / 'a' / 't' / 'test.jsonl'}:line 1: ")
    one_line_error(tmp_path / "b", declared(options_field="c.text", **keys), arc,
                   "test.jsonl:line 2", "task 't'", "row test-1", "hub.label_field", "'E'", "not among", "['A', 'B', 'C']",
                   "hub.option_labels_field")
    one_line_error(tmp_path / "c", declared(options_field="choices"), [{"q": "Which?", "opts": ["a"], "gold": 0}],
                   "row test-0", "hub.options_field", "missing column 'choices'")
    one_line_error(tmp_path / "d", declared(), [{"q": "Which?", "opts": ["a", "b"], "gold": 2}],
                   "row test-0", "hub.label_field", "index 2", "2 options")
    one_line_error(tmp_path / "e", declared(gold="letter"), [{"q": "Which?", "opts": ["a", "b"], "gold": "C"}],
                   "hub.label_field", "'C'", "A-B")
    one_line_error(tmp_path / "f", declared(gold="text"), [{"q": "Which?", "opts": ["a", "b"], "gold": "z"}],
                   "hub.label_field", "'z'", "not among")
    one_line_error(tmp_path / "g", declared(options_field="m.choices", label_field="m.labels", gold="marks"),
                   [{"q": "Which?", "m": {"choices": ["a", "b"], "labels": [1, 1]}}], "hub.label_field", "one 1")
    one_line_error(tmp_path / "h", declared(), [{"q": "Which?", "opts": "a, b", "gold": 0}],
                   "hub.options_field", "not a list of strings")
    one_line_error(tmp_path / "i", declared(), [{"q": 3, "opts": ["a", "b"], "gold": 0}], "hub.question_field", "unexpected type")
    one_line_error(tmp_path / "j", declared(option_labels_field="labs", gold="option_label"),
                   [{"q": "Which?", "opts": ["a", "b"], "labs": ["A"], "gold": "A"}], "hub.option_labels_field", "1 labels", "2 options")
    one_line_error(tmp_path / "k", declared(), [{"q": "Which?", "opts": ["a", "b"], "gold": True}], "hub.label_field", "True")


def test_a_float_gold_column_reads_whole_numbers_as_indices_and_names_the_row_that_is_not_one(tmp_path: Path) -> None:
    rows = [{"q": "Which?", "opts": ["a", "b", "c"], "gold": 2.0}, {"q": "Or?", "opts": ["a", "b"], "gold": 0.0}]
    assert golds(build(tmp_path / "whole", declared(), rows)) == ["c", "a"]
    one_line_error(tmp_path / "nan", declared(), [*rows, {"q": "W?", "opts": ["a", "b"], "gold": float("nan")}],
                   "test.jsonl:line 3", "row test-2", "hub.label_field", "nan is a missing value (NaN), not an option index")
    one_line_error(tmp_path / "half", declared(), [*rows, {"q": "W?", "opts": ["a", "b"], "gold": 1.5}],
                   "test.jsonl:line 3", "row test-2", "1.5 is not a whole number, not an option index")


def test_rows_whose_options_cannot_be_a_question(tmp_path: Path) -> None:
    rows = [{"q": "Fine?", "opts": ["a", "b"], "gold": 0}, {"q": "Twice?", "opts": ["a", "a"], "gold": 0},
            {"q": "Broken?", "opts": ["a", "b\nc"], "gold": 0}, {"q": "One?", "opts": ["a"], "gold": 0},
            {"q": "Many?", "opts": [f"o{i}" for i in range(27)], "gold": 0}, {"q": "Empty?", "opts": ["a", " "], "gold": 0}]
    one_line_error(tmp_path / "a", declared(), rows, "line 2", "row test-1", "hub.options_field", "invalid_options: drop")
    t = build(tmp_path / "b", declared(invalid_options="drop"), rows)
    assert [it.id for it in t.items] == ["test-0"]
    assert [(d["id"], d["line"]) for d in t.source["dropped"]] == [("test-1", 2), ("test-2", 3), ("test-3", 4), ("test-4", 5),
                                                                   ("test-5", 6)]
    assert "line break" in t.source["dropped"][1]["why"] and "27 options" in t.source["dropped"][3]["why"]
    # a gold that is not among the row's options is never dropped: the declaration reads the wrong column
    one_line_error(tmp_path / "c", declared(invalid_options="drop"), [{"q": "Q?", "opts": ["a", "b"], "gold": 5}], "index 5")


def test_k_above_the_servers_max_logprobs_is_refused_before_scoring(tmp_path: Path) -> None:
    from anyjev.run.cell import check_task_label_capacity

    t = build(tmp_path / "a", declared(), [{"q": f"Q{k}?", "opts": [f"o{i}" for i in range(k)], "gold": 0} for k in (3, 6)])
    with pytest.raises(ConfigError, match=r"server.max_logprobs: is 5, but task 't' has item 'test-1' with 6 options"):
        check_task_label_capacity(t, 5)


# ------------------------------------------------------------------------------------------------ config errors


def refused(hub_keys: dict, key_path: str, words: str) -> None:
    task = {"source": "hub", "hub": {"dataset": "org/mc", "revision": "main", "splits": ["test"], "question_field": "q",
                                     "options_field": "opts", "label_field": "gold", "kind": "choice"}}
    for key, value in hub_keys.items():
        if value is None:
            task["hub"].pop(key, None)
        else:
            task["hub"][key] = value
    with pytest.raises(ConfigError) as info:
        config({"t": task})
    assert info.value.key_path == key_path and words in str(info.value), str(info.value)


@pytest.mark.parametrize(("keys", "key_path", "words"), [
    ({"kind": "noul", "yes_labels": ["x"]}, "tasks.t.hub.options_field", "applies to kind choice"),
    ({"kind": "score"}, "tasks.t.hub.options_field", "applies to kind choice"),
    ({"label_names": ["a", "b"]}, "tasks.t.hub.label_names", "each row gives its own options"),
    ({"label_text_field": "x"}, "tasks.t.hub.label_text_field", "each row gives its own options"),
    ({"keep_most_frequent": 3}, "tasks.t.hub.keep_most_frequent", "each row gives its own options"),
    ({"option_names": {"a": "b"}}, "tasks.t.hub.option_names", "each row gives its own options"),
    ({"gold": "option_label"}, "tasks.t.hub.option_labels_field", "gold: option_label"),
    ({"option_labels_field": "labs", "gold": "index"}, "tasks.t.hub.option_labels_field", "gold: option_label"),
    ({"gold": "idx"}, "tasks.t.hub.gold", "'idx' is not one of"),
    ({"question": "Which?"}, "tasks.t.hub.question", "not both"),
    ({"question_field": None}, "tasks.t.hub.question", "give question"),
    ({"options_field": None}, "tasks.t.hub.gold", "applies to options_field"),
    ({"options_field": None, "gold": None, "invalid_options": "drop"}, "tasks.t.hub.invalid_options", "applies to options_field"),
    ({"options_field": None, "gold": None, "option_labels_field": "x"}, "tasks.t.hub.option_labels_field", "applies to options_field"),
    ({"options_field": None, "gold": None, "question_field": None, "question": "Q?"}, "tasks.t.hub.text_field",
     "give either text_field"),
    ({"options_field": None, "gold": None, "question_field": None, "question": "Q?", "label_names": ["a", "b"]},
     "tasks.t.hub.text_field", "may be empty only where each row has its own question or options"),
])
def test_every_declaration_error_names_its_key_path(keys: dict, key_path: str, words: str) -> None:
    refused({"gold": "index"} | keys, key_path, words)


def test_unnamed_labels_say_where_the_options_of_each_row_go(tmp_path: Path) -> None:
    """Integer labels without names, declared the label way, say why they have no name and what else to declare."""
    d = declaration_from_data({"dataset": "org/data", "revision": "main", "splits": ["test"], "text_field": "q",
                               "label_field": "answer", "question": "Which?", "kind": "choice"}, "tasks.t.hub")
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "test.jsonl").write_text(json.dumps({"q": "What?", "choices": ["a", "b"], "answer": 0}) + "\n")
    (folder / "meta.json").write_text(json.dumps({"dataset": "org/data", "config": None, "revision": "main", "splits": {},
                                                  "label_names": {}}))
    with pytest.raises(TaskDataError, match=r"label 0 has no name: the options of a declared task are its label names.*"
                                            r"options_field"):
        hub.build("t", folder, declared=d)


def test_plan_says_k_comes_from_each_row(offline, tmp_path: Path) -> None:
    import yaml

    name = next(n for n, t in EXAMPLES.items() if t["hub"]["dataset"] == "cais/mmlu")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"models": {"m": {"source": "url", "url": "http://127.0.0.1:9", "tokenizer": str(QWEN3_TOKENIZER_DIR)}},
                                    "tasks": {name: as_fixture_task(EXAMPLES[name], tmp_path, local=False)}, "published": None}))
    [cell] = plan_config(path, models_dir="resources/models", hub_cache="resources/hub")["cells"]
    assert "K unknown (choice: each row gives its own options)" in cell["estimate"]
