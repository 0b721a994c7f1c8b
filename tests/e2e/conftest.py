"""Fixtures shared by the end-to-end modules: one local run of the reduced config per session.

`finished_run` is session-scoped so that every e2e module inspects the same local run instead of paying for a
second one (and what its server showed while it scored); `slurm_cluster` is session-scoped so that every SLURM module
shares one cluster start.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from anyjev.serving.health import bearer
from anyjev.serving.state import read_api_key, read_record
from tests.e2e.workflow_helpers import (
    STATE_DIR,
    command_lines_holding,
    make_workdir,
    reduced_config,
    request_lock,
    run_holding_request_locks,
    smollm2_model,
)
from tests.waiting import HANG_GUARD

MODEL = "smol-e2e"
SOURCE = '"test table, same shape as results/published/anyjev-2026.csv"'
# A published table of the same shape as results/published/anyjev-2026.csv (comment lines, long form, a quoted
# source with commas). Rows 1-5 are cells of this run; the last three must be left out of vs_published:
# another model, a task this run does not have, and a metric the summary table does not report.
PUBLISHED_CSV = (
    "# Published numbers for the e2e test (same columns as results/published/anyjev-2026.csv).\n"
    "# Long form: one row per (model, task, level, metric).\n"
    "model,task,level,metric,value,source\n"
    f"{MODEL},mmlu,raw,acc,0.25,{SOURCE}\n"
    f"{MODEL},mmlu,L0,flip,0.10,{SOURCE}\n"
    f"{MODEL},rotten_tomatoes,L1,ece,0.05,{SOURCE}\n"
    # Yes/No at L0 flips nothing (interval [0, 0]): 0.000 is inside the interval, and 1.000 accuracy on
    # SocialIQA for a 135M model is outside any interval it can get on 12 items.
    f"{MODEL},rotten_tomatoes,L0,flip,0.000,{SOURCE}\n"
    f"{MODEL},socialiqa,raw,acc,1.000,{SOURCE}\n"
    f"OtherModel,mmlu,raw,acc,0.9,{SOURCE}\n"
    f"{MODEL},banking20,raw,acc,0.8,{SOURCE}\n"
    f"{MODEL},mmlu,raw,auroc,0.7,{SOURCE}\n"
)


def write_e2e_workdir(work: Path, smollm2_dir: Path) -> dict:
    """The reduced config of `finished_run` (model MODEL, mmlu/socialiqa/rotten_tomatoes, ~20 items each) and
    its published table, written into the scratch run directory WORK; returns the config."""
    work.mkdir(parents=True, exist_ok=True)
    published = work / "published.csv"
    published.write_text(PUBLISHED_CSV)
    config = reduced_config({MODEL: smollm2_model()}, published=str(published))
    make_workdir(work, config, smollm2_dir)
    return config


def while_scoring(work: Path) -> dict:
    """What the managed server of a run in WORK shows once it is up and its scoring job waits to send its first request:
    its key (read from the run's private state), the mode of the key's file, what it answers to requests without the
    key and with it, and to /health, the names it serves; and the processes whose command line holds the key."""
    record = read_record(work / STATE_DIR / f"{MODEL}.json")
    assert record is not None and record.state == "ready", record
    key_file = work / record.api_key_file  # relative to the run's folder, where its jobs run
    key = read_api_key(key_file)
    assert key, f"no key in {key_file}"
    # A completion with the key would be counted by the server in the cell's requests (provenance: counts.server_saw);
    # one without it is refused before it reaches the engine, and /v1/models is counted by no one.
    request = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 1}
    with httpx.Client(trust_env=False, timeout=HANG_GUARD) as client:
        models = client.get(f"{record.url}/v1/models", headers=bearer(key))
        answers = {"completion without the key": client.post(f"{record.url}/v1/completions", json=request).status_code,
                   "/invocations without the key": client.post(f"{record.url}/invocations", json=request).status_code,
                   "/metrics without the key": client.get(f"{record.url}/metrics").status_code,
                   "/v1/models without the key": client.get(f"{record.url}/v1/models").status_code,
                   "/v1/models with the key": models.status_code,
                   "/health without the key": client.get(f"{record.url}/health").status_code}
        served = [m["id"] for m in models.json()["data"]] if models.status_code == 200 else None
    return {"key": key, "key_file_mode": key_file.stat().st_mode & 0o777, "answers": answers,
            "served": served, "command_lines": command_lines_holding(key)}


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory, smollm2_dir):
    """One full local run of the reduced config; later tests (in any e2e module) inspect its outputs, and what its
    server showed while the run scored (`while_scoring`: the run's first request waits until it is seen)."""
    from tests.conftest import require_vllm

    require_vllm()
    work = tmp_path_factory.mktemp("e2e")
    config = write_e2e_workdir(work, smollm2_dir)
    t0 = time.monotonic()
    proc, _, seen = run_holding_request_locks(work, [request_lock(work, MODEL)], 1,
                                              while_held=lambda: while_scoring(work))
    seconds = time.monotonic() - t0
    print(f"\n[e2e] local reduced run (3 cells, --cores 2): {seconds:.0f} s wall")
    assert proc.returncode == 0, proc.stdout[-10000:]
    return {"dir": work, "proc": proc, "seconds": seconds, "config": config, "while_scoring": seen}


@pytest.fixture(scope="session")
def slurm_cluster():
    """tests/slurm/cluster.sh install + start, once for every SLURM test of the session; always stopped at the end."""
    from tests.e2e.slurm_helpers import cluster_step, require_slurm

    require_slurm()
    times = {}
    try:
        for step in ("install", "start"):
            proc, times[step] = cluster_step(step)
            assert proc.returncode == 0, f"cluster.sh {step} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        print(f"\n[slurm] cluster.sh install: {times['install']:.1f} s, start: {times['start']:.1f} s")
        yield times
    finally:
        proc, seconds = cluster_step("stop")
        print(f"\n[slurm] cluster.sh stop: rc {proc.returncode}, {seconds:.1f} s")
        assert proc.returncode == 0, proc.stderr[-3000:]
