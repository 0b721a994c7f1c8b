"""VLLMBackend against a stub /v1/completions server that misbehaves on purpose.

The label log-probs must come back mapped by token id and by choice index, and every way a server can
be wrong (labels missing from top_logprobs, values not renormalised, HTTP errors, hangs, resets,
malformed bodies) must end in a loud error, never in a filled-in value.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest
from stub_http import Hang, Raw, Reply, Reset, Status, StubCompletions, free_port

from anyjev.backends.vllm import VLLMBackend
from anyjev.errors import BackendError, BatchCollisionError, LabelTokenError
from testbed.replies import FINGERPRINT, model_logprobs
from tests.waiting import HANG_GUARD, wait_for

LABELS = [49, 50, 51, 52]
SERVED = "smollm2-test"
NOT_RETURNED = object()


@pytest.fixture
def stub():
    with StubCompletions() as s:
        yield s


def make_backend(url: str, **kw: object) -> VLLMBackend:
    # A timeout only where a test sends a hang (it passes its own); elsewhere a slow answer on a loaded machine must not
    # become a retry that the test would count as a second request.
    opts: dict[str, object] = {"timeout": HANG_GUARD, "retries": 2, "backoff": 0.01, "prompts_per_request": 8,
                               "max_concurrency": 1}
    opts.update(kw)
    return VLLMBackend(url, SERVED, **opts)  # type: ignore[arg-type]


def prompts(n: int) -> list[list[int]]:
    """Distinct token-id prompts of different lengths."""
    return [[1, 9 + i, 100 + 7 * i] + [3] * (i % 3) for i in range(n)]


def top_of(body: dict, choice: int = 0) -> dict:
    return body["choices"][choice]["logprobs"]["top_logprobs"][0]


# ------------------------------------------------------------------------------------------ happy path


def test_the_clients_of_a_process_load_the_certificates_once(stub: StubCompletions, monkeypatch) -> None:
    """Every HTTP client a scoring job makes (its backend, the server's description, health probes, /metrics) verifies
    with one TLS context: loading the certificates costs about 25 ms of CPU a client."""
    import ssl

    from anyjev.serving import health
    from anyjev.serving.describe import describe_server
    from anyjev.serving.metrics import read_metrics

    made = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **kw: made.append(1) or real(*a, **kw))
    health.tls_context.cache_clear()
    for _ in range(3):
        with make_backend(stub.url) as backend:
            backend.label_logprobs(prompts(1), LABELS)
        describe_server(stub.url, "m")
        with health.http_client() as client:
            health.get(client, stub.url + "/health")
        with pytest.raises(BackendError):
            read_metrics(stub.url)  # the stub has no /metrics
    assert len(made) == 1


def test_many_prompts_split_into_requests_and_mapped_back_by_id_and_index(stub: StubCompletions) -> None:
    rng = random.Random(0)
    reordered = []

    def scramble(body: dict, payload: dict) -> None:
        # choices in a random order (their `index` says which prompt) and top_logprobs keys reversed,
        # so neither the position of a choice nor the order of keys matches the labels.
        rng.shuffle(body["choices"])
        reordered.append([ch["index"] for ch in body["choices"]] != sorted(ch["index"] for ch in body["choices"]))
        for ch in body["choices"]:
            top = ch["logprobs"]["top_logprobs"][0]
            ch["logprobs"]["top_logprobs"][0] = dict(reversed(list(top.items())))

    stub.default = Reply(mutate=scramble, delay=0.2)
    labels = [52, 50, 49, 51]  # not sorted: the output must follow this order
    ps = prompts(7)
    with make_backend(stub.url, prompts_per_request=2, max_concurrency=3) as backend:
        out = backend.label_logprobs(ps, labels)
        desc = backend.describe()

    expected = np.array([model_logprobs(p, labels) for p in ps])
    assert out.shape == (7, 4)
    np.testing.assert_allclose(out, expected, atol=1e-12)
    np.testing.assert_allclose(np.exp(out).sum(axis=1), 1.0)
    assert len({tuple(row) for row in out.round(9)}) == 7  # the stub gives every prompt its own values
    assert any(reordered)  # at least one request really came back out of order

    # 7 prompts, 2 per request: 4 requests whose prompts are the consecutive chunks, at most 3 at once
    assert len(stub.requests) == 4
    assert sorted(r["prompt"] for r in stub.requests) == sorted([ps[0:2], ps[2:4], ps[4:6], ps[6:7]])
    assert 2 <= stub.max_in_flight <= 3
    assert set(stub.paths) == {"/v1/completions"}
    for payload in stub.requests:
        assert payload["model"] == SERVED
        assert payload["max_tokens"] == 1
        assert payload["temperature"] == 0
        assert payload["top_p"] == 1
        assert payload["top_k"] == 0
        assert payload["min_p"] == 0
        assert payload["logprobs"] == len(labels)
        assert payload["allowed_token_ids"] == labels
        assert payload["return_tokens_as_token_ids"] is True
        assert all(isinstance(p, list) and all(type(t) is int for t in p) for p in payload["prompt"])
    assert desc["system_fingerprint"] == [FINGERPRINT]


def test_one_prompt_one_request(stub: StubCompletions) -> None:
    with make_backend(stub.url) as backend:
        out = backend.label_logprobs([[5, 6, 7]], LABELS)
    np.testing.assert_allclose(out[0], model_logprobs([5, 6, 7], LABELS), atol=1e-12)
    assert len(stub.requests) == 1
    assert stub.requests[0]["prompt"] == [[5, 6, 7]]


# ----------------------------------------------------------------------------- label-token failures


def test_label_dropped_from_top_logprobs_raises_naming_ids_and_the_fix(stub: StubCompletions, fault_seen) -> None:
    # The raw_logprobs bug as measured on a server without --logprobs-mode: top-K over the whole vocabulary,
    # three labels missing, non-label tokens in their place, the sampled token (713) still a label.
    labels = [589, 713, 35, 36]
    returned = {713: -0.4, 28: -1.9, 291: -2.3, 1813: -2.8}
    decoded = {589: "ord", 713: " year", 35: "3", 36: "4", 28: ",", 291: "ro", 1813: "aces"}

    def raw_mode(body: dict, payload: dict) -> None:
        body["choices"][1]["logprobs"]["top_logprobs"][0] = {f"token_id:{i}": v for i, v in returned.items()}

    stub.default = Reply(mutate=raw_mode)
    result = NOT_RETURNED
    with make_backend(stub.url, decode=decoded.__getitem__) as backend:
        with pytest.raises(LabelTokenError) as info:
            result = backend.label_logprobs(prompts(3), labels)
    assert result is NOT_RETURNED  # nothing came back, so no value was filled in for the missing labels
    err = info.value
    fault_seen(err)
    msg = str(err)
    assert err.missing_ids == [589, 35, 36]
    assert sorted(err.returned_ids) == sorted(returned)
    for i in (589, 35, 36):
        assert f"{i} ({decoded[i]!r})" in msg
    missing_part, returned_part = msg.split("Returned instead:", 1)
    for i in returned:
        assert f"{i} ({decoded[i]!r})" in returned_part
    assert "713" not in missing_part.split("Missing label ids:", 1)[1]
    assert "--logprobs-mode processed_logprobs" in msg
    assert "prompt 1" in msg  # the second prompt of the request is the bad one
    assert len(stub.requests) == 1  # a wrong answer is not retried


def test_label_dropped_in_a_later_request_fails_the_whole_call(stub: StubCompletions) -> None:
    def drop_50(body: dict, payload: dict) -> None:
        if payload["prompt"][0] == prompts(5)[4]:
            del body["choices"][0]["logprobs"]["top_logprobs"][0]["token_id:50"]

    stub.default = Reply(mutate=drop_50)
    result = NOT_RETURNED
    with make_backend(stub.url, prompts_per_request=2, max_concurrency=2) as backend:
        with pytest.raises(LabelTokenError) as info:
            result = backend.label_logprobs(prompts(5), LABELS)
    assert result is NOT_RETURNED
    assert info.value.missing_ids == [50]
    assert "prompt 4" in str(info.value)


def test_extra_non_label_id_raises(stub: StubCompletions, fault_seen) -> None:
    def extra(body: dict, payload: dict) -> None:
        top_of(body)["token_id:999"] = -7.0

    stub.default = Reply(mutate=extra)
    with make_backend(stub.url) as backend, pytest.raises(LabelTokenError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    assert info.value.missing_ids == []
    assert 999 in info.value.returned_ids
    assert "999" in str(info.value).split("Returned instead:", 1)[1]
    fault_seen(info.value)


def test_logprobs_not_summing_to_one_over_labels_raise(stub: StubCompletions, fault_seen) -> None:
    def unnormalised(body: dict, payload: dict) -> None:
        for key in top_of(body):
            top_of(body)[key] = -1.0

    stub.default = Reply(mutate=unnormalised)
    with make_backend(stub.url) as backend, pytest.raises(LabelTokenError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    msg = str(info.value)
    fault_seen(info.value)
    assert "sum" in msg
    assert f"{4 * math.exp(-1.0):.4f}" in msg  # the probability mass the server actually gave the labels
    assert "processed_logprobs" in msg


def test_masked_label_value_raises(stub: StubCompletions) -> None:
    # processed_logprobs reports a masked (disallowed) token as -9999.0: a label must never carry it
    def masked(body: dict, payload: dict) -> None:
        top = top_of(body)
        top["token_id:52"] = -9999.0

    stub.default = Reply(mutate=masked)
    with make_backend(stub.url) as backend, pytest.raises(LabelTokenError, match="masked"):
        backend.label_logprobs(prompts(1), LABELS)


def test_duplicate_label_ids_refused_before_any_request(stub: StubCompletions) -> None:
    with make_backend(stub.url) as backend, pytest.raises(LabelTokenError, match="not distinct"):
        backend.label_logprobs(prompts(1), [49, 50, 49])
    assert stub.requests == []


# -------------------------------------------------------------------------------- transport failures


def test_500_then_success_is_retried(stub: StubCompletions) -> None:
    stub.script = [Status(500)]
    with make_backend(stub.url) as backend:
        out = backend.label_logprobs(prompts(2), LABELS)
    assert len(stub.requests) == 2
    assert stub.requests[0] == stub.requests[1]  # the same request again
    np.testing.assert_allclose(out, [model_logprobs(p, LABELS) for p in prompts(2)], atol=1e-12)


def test_500_forever_names_url_and_attempts(stub: StubCompletions, fault_seen) -> None:
    stub.default = Status(503, {"error": {"message": "engine is restarting"}})
    with make_backend(stub.url, retries=3) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(2), LABELS)
    msg = str(info.value)
    fault_seen(info.value)
    assert f"{stub.url}/v1/completions" in msg
    assert "4 attempts" in msg
    assert "503" in msg and "engine is restarting" in msg
    assert len(stub.requests) == 4


def test_connection_refused_names_url_and_attempts(fault_seen) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with make_backend(url, retries=2) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    msg = str(info.value)
    fault_seen(info.value)
    assert f"{url}/v1/completions" in msg
    assert "3 attempts" in msg
    assert "Connection refused" in msg and "timed out" not in msg  # refused at once, not waited for


def test_connection_reset_is_retried_then_fails(stub: StubCompletions, fault_seen) -> None:
    stub.default = Reset()
    with make_backend(stub.url, retries=2) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    assert len(stub.requests) == 3
    assert "3 attempts" in str(info.value)
    fault_seen(info.value)
    assert stub.url in str(info.value)


def test_connection_reset_once_then_success(stub: StubCompletions) -> None:
    stub.script = [Reset()]
    with make_backend(stub.url) as backend:
        out = backend.label_logprobs(prompts(1), LABELS)
    assert len(stub.requests) == 2
    np.testing.assert_allclose(out[0], model_logprobs(prompts(1)[0], LABELS), atol=1e-12)


def test_hanging_server_times_out_a_bounded_number_of_times(fault_seen) -> None:
    timeout = 1.0
    with StubCompletions() as stub:
        stub.default = Hang(HANG_GUARD)  # never answers: each attempt ends only when the client gives up
        t0 = time.monotonic()
        with make_backend(stub.url, timeout=timeout, retries=2) as backend, pytest.raises(BackendError) as info:
            backend.label_logprobs(prompts(1), LABELS)
        waited = time.monotonic() - t0
        n_requests = len(stub.requests)
        wait_for(lambda: stub.abandoned == n_requests, "the stub seeing the last hanging request abandoned")
    assert n_requests == 3 and stub.abandoned == 3, "every attempt was given up by the client, none answered"
    assert "3 attempts" in str(info.value)
    fault_seen(info.value)
    assert "timed out" in str(info.value)
    assert waited >= 3 * timeout, "an attempt was given up before its timeout"


def test_hang_once_then_success(stub: StubCompletions) -> None:
    stub.script = [Hang(5.0)]
    with make_backend(stub.url, timeout=1.0) as backend:
        out = backend.label_logprobs(prompts(1), LABELS)
    assert len(stub.requests) == 2
    np.testing.assert_allclose(out[0], model_logprobs(prompts(1)[0], LABELS), atol=1e-12)


# ---------------------------------------------------------------------------- bad answers: no retry


def test_malformed_json_fails_at_once_quoting_the_body(stub: StubCompletions, fault_seen) -> None:
    stub.default = Raw('{"choices": [ {"index": 0, "text": "A", ')
    with make_backend(stub.url) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    assert len(stub.requests) == 1
    assert "malformed JSON" in str(info.value)
    fault_seen(info.value)
    assert '{"choices": [ {"index": 0' in str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "logprobs (30) exceeds max_logprobs (20)", "type": "BadRequestError", "param": None, "code": 400}},
        {"object": "error", "message": "logprobs (30) exceeds max_logprobs (20)", "type": "BadRequestError", "code": 400},
    ],
    ids=["error-object", "flat"],
)
def test_400_fails_at_once_quoting_the_server_message(stub: StubCompletions, body: dict) -> None:
    stub.default = Status(400, body)
    with make_backend(stub.url) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(1), list(range(100, 130)))
    msg = str(info.value)
    assert len(stub.requests) == 1
    assert "HTTP 400" in msg
    assert "logprobs (30) exceeds max_logprobs (20)" in msg
    assert stub.url in msg


def test_fewer_choices_than_prompts(stub: StubCompletions, fault_seen) -> None:
    def drop_last(body: dict, payload: dict) -> None:
        body["choices"].pop()

    stub.default = Reply(mutate=drop_last)
    with make_backend(stub.url) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(3), LABELS)
    assert "2 choices for 3 prompts" in str(info.value)
    fault_seen(info.value)
    assert len(stub.requests) == 1


def test_duplicate_choice_index(stub: StubCompletions) -> None:
    def same_index(body: dict, payload: dict) -> None:
        body["choices"][1]["index"] = 0

    stub.default = Reply(mutate=same_index)
    with make_backend(stub.url) as backend, pytest.raises(BackendError, match="choice index 0"):
        backend.label_logprobs(prompts(2), LABELS)


def test_top_logprobs_keyed_by_text_means_token_ids_were_ignored(stub: StubCompletions) -> None:
    def by_text(body: dict, payload: dict) -> None:
        for ch in body["choices"]:
            top = ch["logprobs"]["top_logprobs"][0]
            ch["logprobs"]["top_logprobs"][0] = {"ABCD"[j]: v for j, v in enumerate(top.values())}

    stub.default = Reply(mutate=by_text)
    with make_backend(stub.url) as backend, pytest.raises(BackendError) as info:
        backend.label_logprobs(prompts(2), LABELS)
    assert "return_tokens_as_token_ids" in str(info.value)
    assert "'A'" in str(info.value)


def test_choice_without_logprobs(stub: StubCompletions) -> None:
    def no_logprobs(body: dict, payload: dict) -> None:
        body["choices"][0]["logprobs"] = None

    stub.default = Reply(mutate=no_logprobs)
    with make_backend(stub.url) as backend, pytest.raises(BackendError, match="top_logprobs"):
        backend.label_logprobs(prompts(1), LABELS)


def test_answer_mass_requests_wait_for_label_requests_on_the_same_server(stub: StubCompletions, tmp_path) -> None:
    """vLLM 0.32 replaces a whole engine batch's logprobs when one request sets logprob_token_ids: with a
    request lock, answer-mass (vocab) requests are exclusive and label requests shared, across clients."""
    import fcntl
    import threading

    from anyjev.backends.vllm import VLLMBackend

    labels = [7, 8]
    lock = tmp_path / "m.requests.lock"
    backend = VLLMBackend(stub.url, "m", request_lock=lock)
    other = open(lock, "a")  # another cell in the middle of a label request
    fcntl.flock(other, fcntl.LOCK_SH)
    assert backend.label_logprobs([[1, 2]], labels).shape == (1, 2)  # shared: runs beside it
    done = threading.Event()
    worker = threading.Thread(target=lambda: (backend.vocab_logprobs([[1, 2]], labels), done.set()))
    worker.start()
    assert not done.wait(0.5), "the answer-mass request ran while a label request held the server"
    fcntl.flock(other, fcntl.LOCK_UN)
    other.close()
    assert done.wait(10)
    worker.join()


def test_the_request_lock_is_made_with_its_folder_and_let_go_after_each_request(stub: StubCompletions, tmp_path) -> None:
    """The first request of a server makes its lock file (and the folder it goes in); each label request holds it
    shared only while it is out, so another client's answer-mass window can take it at once after."""
    import fcntl

    lock = tmp_path / "state" / "servers" / "m.requests.lock"
    with make_backend(stub.url, request_lock=lock) as backend:
        backend.label_logprobs(prompts(2), LABELS)
        assert lock.is_file()
        with open(lock, "a") as other:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while a request holds it
        assert backend.label_logprobs(prompts(2), LABELS).shape == (2, len(LABELS))


def test_an_answer_mass_call_holds_the_lock_once_and_sends_its_requests_side_by_side(stub: StubCompletions, tmp_path,
                                                                                      monkeypatch) -> None:
    """The answer masses of a cell go in one exclusive window: the request lock is taken once for the call (and once for
    a window around several calls), and its requests go side by side inside it, as logprob_token_ids requests may
    (vLLM pads each request's ids to the longest list of the batch); each request's own label set comes back."""
    import fcntl
    import threading

    from anyjev.backends import vllm

    taken = []
    real_flock = fcntl.flock
    monkeypatch.setattr(vllm.fcntl, "flock", lambda fh, op: (taken.append(op), real_flock(fh, op))[1])
    arrived = threading.Barrier(4)
    stub.default = Reply(first=lambda: arrived.wait(HANG_GUARD))  # each waits until all four are in flight
    with make_backend(stub.url, prompts_per_request=2, max_concurrency=4, request_lock=tmp_path / "lock") as backend:
        values = backend.vocab_logprobs(prompts(8), LABELS)
        assert backend.requests_sent == 4 and values.shape == (8, 4)
        assert [op for op in taken if op != fcntl.LOCK_UN] == [fcntl.LOCK_EX]
        taken.clear()
        stub.default = Reply()
        with backend.exclusive():
            backend.vocab_logprobs(prompts(3), LABELS)
            backend.vocab_logprobs(prompts(2), LABELS[:2])
        assert [op for op in taken if op != fcntl.LOCK_UN] == [fcntl.LOCK_EX]
    for payload in stub.requests:
        assert "allowed_token_ids" not in payload and payload["logprob_token_ids"] in (LABELS, LABELS[:2])


# ------------------------------------------------------------ a batch shared with a logprob_token_ids request


def collided(body: dict, payload: dict) -> None:
    """What vLLM 0.32 returns to a label request that shared an engine batch with a logprob_token_ids request:
    the sampled label and padding id 0 at -inf (clamped to -9999), for every prompt."""
    for ch in body["choices"]:
        top = ch["logprobs"]["top_logprobs"][0]
        sampled = max(top, key=top.get)
        ch["logprobs"]["top_logprobs"][0] = {sampled: top[sampled], "token_id:0": -9999.0}


def test_a_collided_label_request_is_resent_and_only_clean_values_kept(stub: StubCompletions, tmp_path, caplog) -> None:
    stub.script = [Reply(mutate=collided), Reply(mutate=collided)]
    with make_backend(stub.url, request_lock=tmp_path / "s.requests.lock") as backend:
        out = backend.label_logprobs(prompts(3), LABELS)
        assert backend.batch_collisions == 2 and backend.describe()["batch_collisions_resent"] == 2
    np.testing.assert_allclose(out, [model_logprobs(p, LABELS) for p in prompts(3)], atol=1e-12)
    assert len(stub.requests) == 3 and all(r["prompt"] == prompts(3) for r in stub.requests)
    assert "shared an engine batch" in caplog.text and "resending" in caplog.text


def test_a_request_that_collides_every_time_names_the_real_cause(stub: StubCompletions, fault_seen) -> None:
    stub.default = Reply(mutate=collided)
    result = NOT_RETURNED
    with make_backend(stub.url, retries=2) as backend, pytest.raises(BatchCollisionError) as info:
        result = backend.label_logprobs(prompts(2), LABELS)
    fault_seen(info.value)
    assert result is NOT_RETURNED and len(stub.requests) == 3
    msg = str(info.value)
    assert "logprob_token_ids" in msg and "PR 51789" in msg and "Resent 2 time(s)" in msg
    assert "--logprobs-mode processed_logprobs`" not in msg, "the logprobs mode is not the cause: no advice to set it"
    assert "answer_mass: false" not in msg and "logprob_token_ids (answer-mass) requests off this server" in msg
    assert 0 in info.value.returned_ids and len(info.value.missing_ids) == len(LABELS) - 1


@pytest.mark.parametrize("returned", [
    {50: -0.1, 0: -3.2},  # id 0 with a real value: a token of the vocabulary, not padding
    {50: -0.1, 7: -9999.0},  # another id at -inf
    {50: -0.1, 51: -2.0, 0: -9999.0},  # two labels
    {50: -0.1},  # no padding
])
def test_only_the_exact_collision_signature_is_resent(stub: StubCompletions, returned: dict) -> None:
    def mutate(body: dict, payload: dict) -> None:
        body["choices"][0]["logprobs"]["top_logprobs"][0] = {f"token_id:{i}": v for i, v in returned.items()}

    stub.default = Reply(mutate=mutate)
    with make_backend(stub.url) as backend, pytest.raises(LabelTokenError) as info:
        backend.label_logprobs(prompts(1), LABELS)
    assert not isinstance(info.value, BatchCollisionError) and len(stub.requests) == 1
    assert "--logprobs-mode processed_logprobs" in str(info.value)
