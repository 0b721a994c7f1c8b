"""Every path of a run has one home (anyjev/paths.py, or the step that names the files inside the folder it is given):
no file a rule writes is spelled twice in the library or the workflow; a rule reads another rule's output as
`rules.<name>.output`, never by spelling its path again; the people's commands look where the workflow writes."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import fields
from pathlib import Path

import pytest

from anyjev import cli
from anyjev.paths import CONFIG, Figure, RunPaths
from anyjev.reports.viewer import INDEX
from tests.conftest import REPO
from tests.workflow_rules import written_paths

CODE = [*sorted((REPO / "anyjev").rglob("*.py")), REPO / "workflow" / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk")),
        *sorted((REPO / "workflow").rglob("*.py"))]
RULE_FILES = [REPO / "workflow" / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
COMMON = REPO / "workflow" / "rules" / "common.smk"
FIELD = "\0"  # where an f-string puts a value
# Names that hold paths in the workflow: an input that names one spells a path instead of taking a rule's output.
PATH_SOURCES = ("PATHS", "CELL_LAYOUT")
# Inputs that are files the config names, not another rule's output: a local dataset folder's files.
CONFIG_NAMED = ("local_dataset_files",)


def pattern(path: str) -> str:
    """A rule's path as Snakemake prints it, wildcard constraints dropped: ``{model,a|b}`` -> ``{model}``."""
    return re.sub(r"\{(\w+),[^{}]*\}", r"{\1}", path)


def tails(paths: list[str]) -> dict[str, str]:
    """Each path's shortest end (whole components) that names it alone: a component that is more than wildcards and
    an extension, a folder's own name with its parent, and no other path ending the same way."""
    found = {}
    for path in paths:
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            tail = "/".join(parts[-n:])
            specific = any(re.sub(r"\{\w+\}|\.\w+$", "", part) for part in parts[-n:])
            file_like = n > 1 or "." in parts[-1]
            alone = not any(other != path and (other == tail or other.endswith("/" + tail)) for other in paths)
            if specific and file_like and alone:
                found[path] = tail
                break
    return found


def literals(path: Path) -> list[tuple[int, str]]:
    """The string literals of a Python or Snakemake file (line, text), an f-string's values as FIELD; prose (anything
    with whitespace: docstrings, messages) left out."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    found, start = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        kind = tokenize.tok_name[tok.type]
        if kind == "FSTRING_START" and start is None:  # Python >= 3.12 splits an f-string into tokens
            start = tok.start
        if kind in ("STRING", "FSTRING_END"):
            begin = start if kind == "FSTRING_END" else tok.start
            start = None if kind == "FSTRING_END" else start
            if start is not None:
                continue
            text = source[offsets[begin[0] - 1] + begin[1]: offsets[tok.end[0] - 1] + tok.end[1]]
            node = ast.parse(text.strip(), mode="eval").body
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                value = node.value
            elif isinstance(node, ast.JoinedStr):
                value = "".join(p.value if isinstance(p, ast.Constant) else FIELD for p in node.values)
            else:
                continue
            if not re.search(r"\s", value):
                found.append((begin[0], value))
    return found


def spellings() -> dict[str, list[str]]:
    """Each written path's tail, with every literal in the library and the workflow that spells it."""
    written = sorted({pattern(p) for p in written_paths()})
    ends = tails(written)
    assert set(ends) == set(written), f"no tail for {sorted(set(written) - set(ends))}"
    spelled: dict[str, list[str]] = {tail: [] for tail in ends.values()}
    for path in CODE:
        for line, text in literals(path):
            for tail in spelled:
                if text == tail or text.endswith("/" + tail) or text.endswith(FIELD + tail):
                    spelled[tail].append(f"{path.relative_to(REPO)}:{line}: {text.replace(FIELD, '{...}')!r}")
    return spelled


def test_no_file_a_rule_writes_is_spelled_twice() -> None:
    twice = {tail: where for tail, where in spellings().items() if len(where) > 1}
    assert not twice, "spelled more than once (give it one home: anyjev/paths.py, or the step that writes the " \
                      f"folder it is in): {twice}"


def test_the_summary_table_is_spelled_once_in_the_paths_module() -> None:
    assert [w.split(":")[0] for w in spellings()["summary.csv"]] == ["anyjev/paths.py"]


def test_the_tails_tell_paths_apart() -> None:
    assert tails(["logs/tables/summary.log", "logs/plots/summary.log", "results/viewer/cells",
                  "results/plots/reliability/{model}/{task}.png", "results/tables/summary.csv"]) == {
        "logs/tables/summary.log": "tables/summary.log", "logs/plots/summary.log": "plots/summary.log",
        "results/viewer/cells": "viewer/cells", "results/plots/reliability/{model}/{task}.png": "reliability/{model}/{task}.png",
        "results/tables/summary.csv": "summary.csv"}


def input_blocks(path: Path) -> list[tuple[int, str]]:
    """The `input:` sections of a rule file: (line, their text)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    for i, line in enumerate(lines):
        head = re.fullmatch(r"(\s*)input:\s*", line)
        if not head:
            continue
        indent, body = len(head.group(1)), []
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            body.append(following)
        blocks.append((i + 1, "\n".join(body)))
    return blocks


def common_functions() -> dict[str, str]:
    """The functions of workflow/rules/common.smk (plain Python) and their source."""
    source = COMMON.read_text(encoding="utf-8")
    return {node.name: ast.get_source_segment(source, node) for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef)}


def test_rules_read_each_others_outputs_as_rules_output() -> None:
    """No rule's input spells a path or names where paths are kept: it takes another rule's output
    (`rules.<name>.output`, expanded over the cells), or a file the config names (a task file, the published table);
    the common.smk functions an input calls do the same."""
    functions = common_functions()
    blocks = [(path, line, text) for path in RULE_FILES for line, text in input_blocks(path)]
    assert len(blocks) >= 12
    chained = 0
    for path, line, text in blocks:
        where = f"{path.relative_to(REPO)}:{line}"
        assert '"' not in text and "'" not in text, f"{where}: an input spells a path: {text}"
        called = [name for name in re.findall(r"\b(\w+)\b", text) if name in functions]
        sources = text + "".join(functions[name] for name in called)
        assert not [s for s in PATH_SOURCES if re.search(rf"\b{s}\b", sources)], f"{where}: {text} (calls {called})"
        chained += "rules." in sources or called == list(CONFIG_NAMED)
    assert chained == len(blocks), "every rule's input reads another rule's output, or files the config names"


def test_the_commands_look_where_the_workflow_writes() -> None:
    """The people's commands default to anyjev.paths' places, and every file anyjev.paths names is one the
    workflow writes (read from the rules as Snakemake reads them)."""
    paths = RunPaths()
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    defaults = {(name, action.dest): action.default for name, p in commands.items() for action in p._actions}
    assert defaults[("stop-servers", "state_dir")] == paths.state_dir
    assert defaults[("ls", "tasks_dir")] == paths.tasks_dir and defaults[("ls", "config")] == CONFIG
    assert defaults[("plan", "models_dir")] == paths.models_dir and defaults[("plan", "hub_cache")] == paths.hub_cache
    assert defaults[("viewer", "out")] == paths.viewer
    written = {pattern(p) for p in written_paths()}
    named = []
    for name in dir(RunPaths):
        value = getattr(paths, name)
        if name.startswith("_") or callable(value) or name in {f.name for f in fields(RunPaths)}:
            continue
        named += [value] if isinstance(value, str) else list(value.values()) if isinstance(value, dict) else \
            [value.png, value.pdf] if isinstance(value, Figure) else []
    folders = {paths.models_dir, paths.hub_cache, paths.state_dir, paths.jobs_dir, paths.lock_record, paths.tasks_dir,
               paths.results, paths.logs, paths.benchmarks, paths.cell_dir, paths.staged_dir, paths.viewer, paths.server_log,
               paths.allocations_dir, paths.claims}  # (claims: written by the workflow's onstart, not by a rule)
    unwritten = sorted(set(named) - folders - written)
    assert not unwritten, f"anyjev/paths.py names files no rule writes: {unwritten}"
    assert f"{paths.viewer}/{INDEX}" in written and paths.task_file in written and paths.allocation in written


@pytest.mark.parametrize(("limit", "root"), [(None, ""), (5, "smoke/limit-5/")])
def test_a_smoke_run_keeps_its_own_files_apart(limit, root) -> None:
    from anyjev.paths import run_paths

    paths = run_paths(limit)
    assert paths.summary["csv"] == f"{root}results/tables/summary.csv" and paths.task_file.startswith(root)
    assert paths.models_dir == "resources/models" and paths.state_dir == ".anyjev/servers"  # shared
