"""Committed records say which code made them and hold nothing of the machine that wrote them: every cell of the
reference run under results/cells was scored by a clean commit, and no committed file names a folder of the machine
that wrote it (a temporary folder, this checkout's own folder, a user's home): no record or doc names any absolute
path, and no code names a test's temporary folder or a home."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
# Absolute paths of a machine: a POSIX root folder that is not part of any URL or package name.
ABSOLUTE = re.compile(r'(?<![\w.:/-])/(?:tmp|work|root|home|Users|private|var/folders|opt)/[^\s"\',)]*')
# In code, a fixed scratch location (`--out /tmp/scale.json` in a usage line, SLURM's state folder) is a choice, not a
# trace of the machine: code may name /tmp/NAME, never pytest's temporary folders, a home or a checkout's folder.
MACHINE = re.compile(r'(?<![\w.:/-])/(?:tmp/pytest-of-|work/|root/|home/|Users/|private/var/folders/)[^\s"\',)]*')
TEXT = (".json", ".jsonl", ".csv", ".md", ".tex", ".html", ".js", ".txt", ".tsv")
RECORDS = ("results/", "docs/", "config/")  # with every .md: what a reader takes as a record of a run


def test_every_committed_cell_was_scored_by_a_clean_commit():
    provenances = sorted(RESULTS.glob("cells/*/*/provenance.json"))
    assert provenances
    for path in provenances:
        git = json.loads(path.read_text())["git"]
        assert git["dirty"] is False, f"{path.relative_to(REPO)}: made from uncommitted code"
        assert re.fullmatch(r"[0-9a-f]{40}", git["commit"] or ""), f"{path.relative_to(REPO)}: no commit recorded"


def committed_files() -> list[str]:
    out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True, check=True).stdout
    return [p for p in out.split("\0") if p and (REPO / p).is_file()]


def machine_paths(rel: str, text: str) -> list[str]:
    """The folders of a machine that the committed file REL names: any absolute path in a record or a doc, a test's
    temporary folder, a home or a checkout's folder in anything else."""
    pattern = ABSOLUTE if rel.startswith(RECORDS) or rel.endswith(".md") else MACHINE
    return [f"{rel}:{n}: {m[:80]}" for n, line in enumerate(text.splitlines(), start=1) for m in pattern.findall(line)]


def test_no_committed_file_names_a_folder_of_the_machine_that_wrote_it():
    found = []
    for rel in committed_files():
        if rel == Path(__file__).relative_to(REPO).as_posix():
            continue  # this test's own examples of what it refuses
        data = (REPO / rel).read_bytes()
        if b"\0" not in data[:8192]:  # text only
            found += machine_paths(rel, data.decode("utf-8", errors="replace"))
    assert len(committed_files()) > 100 and any(rel.startswith("results/") for rel in committed_files())
    assert not found, f"{len(found)} machine path(s) in committed files, e.g. {found[:5]}"


def test_the_pattern_finds_machine_paths_and_nothing_else():
    assert ABSOLUTE.findall('"python": "/work/main/.venv/bin/python"') == ["/work/main/.venv/bin/python"]
    assert ABSOLUTE.findall("--workdir /tmp/bench-viewer-run") == ["/tmp/bench-viewer-run"]
    assert ABSOLUTE.findall("github.com/nokia/x/tmp/y, https://h/work/z, resources/models/x, a/opt/b") == []


def test_a_doc_may_name_no_absolute_path_and_code_no_folder_of_a_machine():
    line = "see /tmp/pytest-of-root/pytest-43/test_x0/t.jsonl and /tmp/scale.json"
    assert [m.split(": ", 1)[1] for m in machine_paths("docs/fault-report.md", line)] == [
        "/tmp/pytest-of-root/pytest-43/test_x0/t.jsonl", "/tmp/scale.json"]
    assert [m.split(": ", 1)[1] for m in machine_paths("bench/x.py", line)] == ["/tmp/pytest-of-root/pytest-43/test_x0/t.jsonl"]
    assert machine_paths("tests/x.py", "cwd='/root/anyjev', '/work/main/.venv', /home/u/x")[0].endswith("/root/anyjev")
    assert len(machine_paths("tests/x.py", "cwd='/root/anyjev', '/work/main/.venv', /home/u/x")) == 3
