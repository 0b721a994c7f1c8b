"""Committed records say which code made them and hold nothing of the machine that wrote them: every cell of the
reference run under results/cells was scored by a clean commit, and no committed record under results/ names an
absolute path (a temporary folder, this checkout's own folder, a user's home)."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
# Absolute paths of a machine: a POSIX root folder that is not part of any URL or package name.
ABSOLUTE = re.compile(r'(?<![\w.:/-])/(?:tmp|work|root|home|Users|private|var/folders|opt)/[^\s"\',)]*')
TEXT = (".json", ".jsonl", ".csv", ".md", ".tex", ".html", ".js", ".txt", ".tsv")


def test_every_committed_cell_was_scored_by_a_clean_commit():
    provenances = sorted(RESULTS.glob("cells/*/*/provenance.json"))
    assert provenances
    for path in provenances:
        git = json.loads(path.read_text())["git"]
        assert git["dirty"] is False, f"{path.relative_to(REPO)}: made from uncommitted code"
        assert re.fullmatch(r"[0-9a-f]{40}", git["commit"] or ""), f"{path.relative_to(REPO)}: no commit recorded"


def test_no_committed_record_names_an_absolute_path():
    found = []
    for path in sorted(p for p in RESULTS.rglob("*") if p.is_file() and p.suffix in TEXT):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for match in ABSOLUTE.findall(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {match[:80]}")
    assert not found, f"{len(found)} absolute path(s) in committed records, e.g. {found[:5]}"


def test_the_pattern_finds_machine_paths_and_nothing_else():
    assert ABSOLUTE.findall('"python": "/work/main/.venv/bin/python"') == ["/work/main/.venv/bin/python"]
    assert ABSOLUTE.findall("--workdir /tmp/bench-viewer-run") == ["/tmp/bench-viewer-run"]
    assert ABSOLUTE.findall("github.com/nokia/x/tmp/y, https://h/work/z, resources/models/x, a/opt/b") == []
