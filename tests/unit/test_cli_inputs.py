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
