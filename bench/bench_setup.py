#!/usr/bin/env python
"""README command 1's setup part from a fresh clone: how long ``bash scripts/setup_env.sh`` takes.

The repository is cloned at a commit into a temporary folder (``git clone`` of this checkout, then that commit
checked out: no environment, no asset, nothing of this checkout's but its committed files), and there
``bash scripts/setup_env.sh`` runs as README command 1 runs it, with an empty pip cache of its own (a machine that
has downloaded nothing yet). Recorded: the wall time of the whole setup and of each of its steps (the time between
the ``[setup]`` lines it prints), its exit status, the vLLM it chose, the size of the environments it made, and
which pip settings of this machine it ran under (their names only: local wheel folders or a mirror make a setup
faster than PyPI alone). The clone is removed afterwards.

    .venv/bin/python bench/bench_setup.py [--commit HEAD] [--out results/bench/setup.json]

It downloads and installs two environments (a few GB): run it alone.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.common import fresh_clone, outside_env, run_record, run_under_limit, timed_lines, write_json  # noqa: E402

SETUP = ["bash", "scripts/setup_env.sh"]  # README command 1's setup part


def pip_settings() -> list[str]:
    """The names of the pip settings this machine sets (``global.find-links``, ...), without their values (paths of
    this machine)."""
    proc = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    names = {line.split("=", 1)[0] for line in proc.stdout.splitlines() if "=" in line}
    # ":env:.find-links" is set by the environment variable PIP_FIND_LINKS
    return sorted("PIP_" + n.removeprefix(":env:.").upper().replace("-", "_") if n.startswith(":env:.") else n
                  for n in names)


def folder_mb(path: Path) -> float:
    total = sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return round(total / 1e6, 1)


def steps(lines: list[tuple[float, str]], wall: float) -> dict[str, float]:
    """Seconds per step: from each ``[setup] <step> ...`` line to the next one (the last to the end)."""
    marks = [(t, re.sub(r"\s*\(.*|\s*\.\.\.$|:.*", "", text.removeprefix("[setup] ")).strip())
             for t, text in lines if text.startswith("[setup] ") and not text.startswith("[setup] done")]
    return {name: round((marks[i + 1][0] if i + 1 < len(marks) else wall) - t, 1) for i, (t, name) in enumerate(marks)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", default="HEAD", help="the commit to clone (default: this checkout's HEAD)")
    ap.add_argument("--out", default="results/bench/setup.json")
    args = ap.parse_args(argv)
    report = run_record()
    with tempfile.TemporaryDirectory(prefix="bench-setup-") as scratch:
        clone, sha = fresh_clone(args.commit, Path(scratch))
        env = outside_env() | {"PIP_CACHE_DIR": str(Path(scratch) / "pip-cache")}  # nothing downloaded before
        print(f"[bench_setup] {' '.join(SETUP)} in a clone at {sha[:10]}", flush=True)
        status, wall, lines = timed_lines(SETUP, clone, env)
        if status != 0:
            raise SystemExit(f"bench_setup: {' '.join(SETUP)} exited {status}:\n" + "\n".join(t for _, t in lines[-20:]))
        chosen = next((t.split(": ", 1)[1] for _, t in lines if t.startswith("[setup] vLLM for the server:")), "")
        report |= {
            "commit": sha,  # the code measured is the clone's: its committed files, clean whatever this checkout holds
            "dirty": False,
            "what": "a git clone of the repository at the commit, then `bash scripts/setup_env.sh` (README command 1's "
                    "setup part) in it, with an empty pip cache",
            "setup_command": " ".join(SETUP),
            "wall_s": wall,
            "steps_s": steps(lines, wall),
            "vllm": chosen,
            "environments_mb": {name: folder_mb(clone / name) for name in (".venv", ".venv-server", ".assets")},
            "pip_settings": pip_settings(),
            "setup_lines": [t.replace(str(clone), ".") for _, t in lines if t.startswith("[setup]")],
        }
    out = REPO / args.out
    write_json(out, report)
    print(f"wrote {out}: setup {wall:.0f} s ({wall / 60:.1f} minutes)")
    return 0


if __name__ == "__main__":
    sys.exit(run_under_limit(main, seconds=3600))
