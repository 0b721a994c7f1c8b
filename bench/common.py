"""What the benchmarks share: the default experiment's SmolLM2 CPU server (config/config.yaml holds its flags), run
from this checkout's vLLM environment."""

from __future__ import annotations

import dataclasses
import os
import platform
from pathlib import Path

import httpx

from anyjev.serving.spec import ServerSpec
from anyjev.settings import Settings

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "config" / "config.yaml"
MODELS_DIR = REPO / "resources" / "models"
SMOL_DIR = MODELS_DIR / "smollm2-135m"
SERVER_PYTHON = REPO / ".venv-server" / "bin" / "python"


def smollm2_spec(name: str, **changes) -> ServerSpec:
    """The default config's SmolLM2 server (pinned flags, fp32 head) under NAME (its served name too), with CHANGES
    (any ServerSpec field: dtype, prefix_caching, server_env, model, ...)."""
    base = Settings.load(CONFIG, workdir=REPO).server_spec("smollm2-135m", str(MODELS_DIR))
    fields = {"name": name, "served_name": name, "model": str(SMOL_DIR), "python": str(SERVER_PYTHON)}
    return dataclasses.replace(base, **(fields | changes))


def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "cpu_model": model,
            "hostname": platform.node(), "python": platform.python_version(), "httpx": httpx.__version__,
            "note": "client and server share these cores; the machine also runs other work (see loadavg)"}


def measured_on(report: dict) -> str:
    """"run 2026-11-30, 2 CPU cores (AMD EPYC), load 0.9 at start, vLLM 0.32.0": the date and the machine a JSON
    records."""
    parts = [f"run {report['date'][:10]}"]
    m = report.get("machine")
    if m:
        cores = f"{m['nproc']} CPU cores" + (f" ({m['cpu_model']})" if m.get("cpu_model") else "")
        parts.append(cores)
        if m.get("loadavg_start") is not None:
            parts.append(f"load {m['loadavg_start']:.1f} at start")
    else:
        parts.append("machine not recorded")
    if report.get("vllm_version"):
        parts.append(f"vLLM {report['vllm_version']}")
    return ", ".join(parts)
