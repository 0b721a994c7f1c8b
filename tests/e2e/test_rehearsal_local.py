"""The CPU dress rehearsal of config/paper.yaml, run locally (`snakemake --cores 2 --keep-going`): what the SLURM
rehearsal (tests/e2e/test_rehearsal_slurm.py) asserts on a cluster, without the cluster.

tests/e2e/rehearsal.py builds the fixtures (hub-shaped data read by the real `datasets` library, three random-weight
Qwen3 stand-ins on the real Qwen3 tokenizer, paper.yaml's config changed only where a CPU needs it, and a fourth
`url` model on a server without the pinned logprobs mode). Checked: one server start per model, the url cell fails
alone naming the missing label ids, every other cell is scored and evaluated, `anyjev plan` counts exactly what
the run sent (prompts and prompt tokens per cell), and no vLLM process is left.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import require_vllm
from tests.e2e import rehearsal as R
from tests.e2e.workflow_helpers import job_blocks, leftover_vllm, run_snakemake

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def local_rehearsal(tmp_path_factory):
    require_vllm()
    fx = R.prepare_rehearsal(tmp_path_factory.mktemp("rehearsal"))
    t0 = time.monotonic()
    with R.raw_server_for(fx["models"][R.MODELS[0]], fx["root"] / "raw-server.log") as raw:
        raw_start = time.monotonic() - t0
        R.write_rehearsal_config(fx, raw["url"])
        t0 = time.monotonic()
        proc = run_snakemake(fx["work"], "--keep-going")
        seconds = time.monotonic() - t0
    (fx["root"] / "snakemake.out").write_text(proc.stdout + proc.stderr)
    print(f"\n[rehearsal] raw-logprobs server start: {raw_start:.0f} s; local run (--cores 2): {seconds:.0f} s wall")
    return fx | {"proc": proc, "out": proc.stdout + proc.stderr, "seconds": seconds}


def test_local_rehearsal(local_rehearsal):
    fx, out = local_rehearsal, local_rehearsal["out"]
    work = fx["work"]
    assert fx["proc"].returncode != 0, "the url cell must fail the run"
    R.check_url_cell_fails_alone(fx, out)
    R.check_cells_scored(work)
    assert R.server_starts(work) == dict.fromkeys(R.MODELS, 1)
    rows = R.compare_plan(work)
    print("\n[rehearsal] plan vs run (items, prompts, prompt tokens):\n  " + "\n  ".join(
        f"{r['cell']}: plan {r['plan']} run {r['run']}" for r in rows))
    assert len(rows) == 9 and all(r["estimate"] is None for r in rows)
    assert [r["plan"] for r in rows] == [r["run"] for r in rows]
    for model in R.MODELS:
        for task in R.TASKS:
            prov = json.loads((work / f"results/cells/{model}/{task}/provenance.json").read_text())
            c = prov["counts"]
            print(f"[rehearsal] {model}/{task}: {c['prompts']} prompts ({c['prompt_tokens']} tokens) in {prov['seconds']} s "
                  f"= {c['prompts'] / prov['seconds']:.1f} prompts/s; server start {prov['server'].get('start_seconds')} s")
    jobs = job_blocks(out)
    print("[rehearsal] jobs: " + ", ".join(sorted({j["rule"] for j in jobs})))
    assert leftover_vllm(str(fx["root"])) == []
