"""The five published hub tasks make exactly the items they made as hand-written builders: item for item, byte for
byte (each item's line of the task file: id, state, question, options, gold), with the same task name, prior group
and source.

The reference records each item's id, gold option and the sha256 of its task-file line (its first 16 hex digits), and
for the hand-written cases the lines themselves (readable; the random cases' lines would make a file of 600 kB).

tests/data/hub-published-items.json was captured from the builders of commit 96dae4f (one `_build_<task>` function
per task, before the tasks became declarations) on the cases of tests/published_hub_cases.py:
`python -m tests.unit.test_hub_published_items --capture` run at that commit. Do not regenerate it to make this test
pass: it is the reference.
"""

from __future__ import annotations

import json
import re
import sys
from hashlib import sha256
from pathlib import Path

import pytest

import anyjev.data.hub as hub
from tests.published_hub_cases import all_cases, snapshot, write_case, written_cases

EXPECTED = Path(__file__).resolve().parents[1] / "data" / "hub-published-items.json"
CASES = {case.name: case for case in all_cases()}
WRITTEN = {case.name for case in written_cases()}


def built(case, root: Path) -> dict:
    """The reference record of CASE built by the checked-out code."""
    snap = snapshot(hub.build(case.task, write_case(root, case)))
    lines = snap.pop("items")
    snap["items"] = [[json.loads(line)["id"], json.loads(line)["gold"], sha256(line.encode()).hexdigest()[:16]] for line in lines]
    if case.name in WRITTEN:
        snap["lines"] = lines
    return snap


def test_every_case_is_recorded() -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))
    assert set(expected) == set(CASES)
    assert {c.task for c in CASES.values()} == {"banking20", "newsgroups", "injection", "massive_route", "clinc_escalate"}
    # the cases exercise what the builders do: banking's top-20 cut, newsgroups' length rules, both clinc encodings
    assert sum(len(e["items"]) for e in expected.values()) > 800
    assert [json.loads(line)["state"] for line in expected["newsgroups"]["lines"]] == ["b" * 40, "x" * 2000]


@pytest.mark.parametrize("name", sorted(CASES))
def test_published_task_items_are_unchanged(name: str, tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))[name]
    got = built(CASES[name], tmp_path)
    assert got["task"] == expected["task"] and got["prior_group"] == expected["prior_group"]
    assert got["source"] == expected["source"]
    assert [item[0] for item in got["items"]] == [item[0] for item in expected["items"]]  # the same items, in order
    for mine, theirs in zip(got["items"], expected["items"], strict=True):
        assert mine == theirs, f"item {mine[0]}: gold or task-file line differs"
    assert got.get("lines") == expected.get("lines")


def capture(path: Path) -> None:
    """Write the reference file from the builders of the checked-out code."""
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, case) in enumerate(CASES.items()):
            out[name] = built(case, Path(tmp) / str(i))
    text = json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True)
    # one line per item record: [id, gold, hash]
    text = re.sub(r"\[\n\s+(\"[^\n]*\"),\n\s+(\"[^\n]*\"),\n\s+(\"[0-9a-f]{16}\")\n\s+\]", r"[\1, \2, \3]", text)
    assert json.loads(text) == out
    path.write_text(text + "\n", encoding="utf-8")
    print(f"{path}: {len(out)} cases, {sum(len(v['items']) for v in out.values())} items")


if __name__ == "__main__":
    if sys.argv[1:] != ["--capture"]:
        raise SystemExit("usage: python -m tests.unit.test_hub_published_items --capture")
    capture(EXPECTED)
