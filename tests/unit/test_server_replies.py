"""What a cell says when a `url` server answers wrong for a reason of its own setup (issue 32, items 5 and 6): a proxy's
HTML error page is reduced to its text, a server started with too small a `--max-logprobs` is named with the flag and
the value the task needs, and a batch collision stays a batch collision with advice that fits the cell (whatever its
scoring.answer_mass, the colliding requests are another client's)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from stub_http import Reply, Status, StubCompletions

from anyjev.backends.vllm import VLLMBackend
from anyjev.errors import BackendError, BatchCollisionError
from anyjev.run.canary import canary
from anyjev.run.cell import ExternalServer
from tests.waiting import HANG_GUARD

LABELS = list(range(101, 101 + 26))  # a 26-option task: A-Z
NGINX_502 = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>"
             "\r\n<hr><center>nginx/1.18.0 (Ubuntu)</center>\r\n</body>\r\n</html>\r\n")


@pytest.fixture
def stub():
    with StubCompletions() as s:
        yield s


def backend(url: str, **kw) -> VLLMBackend:
    # no hang is sent here: a timeout would only turn a slow answer on a loaded machine into a retry
    return VLLMBackend(url, "m", timeout=HANG_GUARD, retries=1, backoff=0.01, **kw)


@pytest.mark.parametrize("code", [404, 502])
def test_an_html_error_page_is_reduced_to_its_text(code: int, stub: StubCompletions, fault_seen) -> None:
    stub.default = Status(code, NGINX_502.replace("502", str(code)))
    with backend(stub.url) as b, pytest.raises(BackendError) as info:
        b.label_logprobs([[1, 2, 3]], LABELS[:4])
    message = str(info.value)
    assert "<" not in message and "\n" not in message, message
    assert f"HTTP {code}: {code} Bad Gateway nginx/1.18.0 (Ubuntu)" in message, message
    fault_seen(info.value)


def test_too_small_max_logprobs_names_the_flag_and_the_value_the_task_needs(stub: StubCompletions, fault_seen) -> None:
    """vLLM's own 400 for a server started with the default --max-logprobs 20 and a 26-label request."""
    said = "Requested sample logprobs of 26, which is greater than max allowed: 20"
    stub.default = Status(400, {"error": {"message": said, "type": "BadRequestError", "param": "logprobs", "code": 400}})
    with backend(stub.url) as b, pytest.raises(BackendError) as info:
        b.label_logprobs([[1, 2, 3]], LABELS)
    message = str(info.value)
    assert "`--max-logprobs 26`" in message and "at most 20" in message and said in message, message
    assert len(stub.requests) == 1, "a 400 is not retried"
    fault_seen(info.value)


def collided(body: dict, payload: dict) -> None:
    """vLLM 0.32's answer to a label request that shared an engine batch with a logprob_token_ids request."""
    for choice in body["choices"]:
        top = choice["logprobs"]["top_logprobs"][0]
        sampled = max(top, key=top.get)
        choice["logprobs"]["top_logprobs"][0] = {sampled: top[sampled], "token_id:0": -9999.0}


def test_a_collision_at_the_canary_stays_a_batch_collision_with_advice_that_fits(stub: StubCompletions, tmp_path,
                                                                                 fault_seen) -> None:
    """A url cell with scoring.answer_mass off sends no logprob_token_ids request: the advice names the other client
    and the lock it is outside of, never the setting that is already off."""
    stub.default = Reply(mutate=collided)
    lock = ExternalServer(stub.url, "m", str(tmp_path / "state")).request_lock
    item = SimpleNamespace(item=SimpleNamespace(id="q1"), layouts=[(None, [1, 2, 3])], label_ids=LABELS[:4])
    with backend(stub.url, request_lock=lock) as b, pytest.raises(BatchCollisionError) as info:
        canary(b, item, answer_mass=False)
    message = str(info.value)
    assert message.startswith("canary request (item 'q1') failed: prompt 0: the server returned only label")
    assert "answer_mass: false" not in message and str(lock) in message and "outside it" in message, message
    assert info.value.missing_ids and 0 in info.value.returned_ids
    fault_seen(info.value)
