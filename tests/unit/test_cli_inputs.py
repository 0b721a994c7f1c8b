"""The project's own commands on a config path that is not a file, and the permissions of the files they write.

A user who mistypes `--config` gets one line naming the path and what is wrong with it, exit code 2, no Python
traceback (issue 23, item 3). Result files are written with the permissions the umask gives (a group on a shared
cluster filesystem can read them), not mkstemp's private 0600 (item 5).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from anyjev.files import write_json_atomic, write_text_atomic

COMMANDS = [["check-config"], ["plan"], ["ls"]]


def run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "anyjev", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=os.environ | {"PYTHONPATH": str(Path(__file__).resolve().parents[2])})


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("kind", ["missing", "folder"])
def test_a_config_path_that_is_not_a_file_is_named_without_a_traceback(command, kind, tmp_path, fault_seen) -> None:
    path = tmp_path / ("no-such.yaml" if kind == "missing" else "a-folder")
    if kind == "folder":
        path.mkdir()
    proc = run_cli([*command, "--config", str(path)], tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out, out
    assert str(path) in out, out
    assert ("no such config file" if kind == "missing" else "is a folder, not a config file") in out, out
    fault_seen(f"{out.strip()} (exit {proc.returncode})")


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_result_files_get_the_mode_the_umask_gives(umask, mode, tmp_path, fault_seen) -> None:
    old = os.umask(umask)
    try:
        text = write_text_atomic(tmp_path / "summary.csv", "a,b\n")
        data = write_json_atomic(tmp_path / "metrics.json", {"acc": 0.5})
    finally:
        os.umask(old)
    assert stat.S_IMODE(text.stat().st_mode) == mode
    assert stat.S_IMODE(data.stat().st_mode) == mode
    fault_seen(f"(no message) umask {umask:03o}: summary.csv and metrics.json written with mode {mode:03o}")
    assert text.read_text() == "a,b\n"


@pytest.mark.parametrize("cut", ["mid-line", "mid-header"])
def test_a_scores_file_torn_mid_line_is_refused_with_the_way_back(cut, tmp_path, capsys) -> None:
    """A published scores file cut short (a copy interrupted, a full disk) is refused by evaluate naming the file and
    line, with what to do: delete it, and the staged copy is published again without a server (issue 46, 6)."""
    from anyjev.cli import EXIT_BAD_INPUT, main
    from anyjev.numbers.options import EvaluationOptions
    from anyjev.run.evaluate import EvaluateJob

    scores = tmp_path / "scores.jsonl"
    lines = ['{"type":"header","format":"anyjev.scores/1","identity":{"task":"t"}}', '{"id":"a","type":"item","gold":0}']
    text = "\n".join(lines) + "\n"
    scores.write_text(text[: len(lines[0]) + 1 + 12] if cut == "mid-line" else text[:30])
    code = main(["evaluate", "--job", EvaluateJob(EvaluationOptions()).to_json(), "--scores", str(scores), "--out",
                 str(tmp_path / "metrics.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_BAD_INPUT, err
    where = "line 2" if cut == "mid-line" else "line 1"
    assert err[-1].startswith(f"anyjev evaluate: FileFormatError: {scores}:{where}: not JSON"), err
    assert err[-1].endswith("delete it and run again: a cell scored by its model's job (score_jobs: model) is published "
                            "again from its staged copy, without a server; a cell scored alone is scored again"), err
    assert not any("Traceback" in line for line in err)


def test_check_config_from_a_study_folder_finds_the_vllm_environment_as_the_workflow_does(tmp_path) -> None:
    """From a study folder (docs/configuration.md, "A study in a folder of its own"), `check-config` reads
    `server.python` (default .venv-server/bin/python) from the workflow's folder when the study's lacks it, as the
    workflow does (anyjev.config.with_shipped_paths), instead of refusing it (issue 46, 6)."""
    from tests.conftest import REPO, require_vllm

    require_vllm()
    (tmp_path / "my.yaml").write_text("models:\n  m: {source: smollm2}\ntasks:\n  mmlu: {source: builtin}\n")
    proc = run_cli(["check-config", "--config", "my.yaml"], tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "my.yaml: ok", proc.stdout + proc.stderr
    assert not (tmp_path / ".venv-server").exists() and (REPO / ".venv-server/bin/python").exists()
