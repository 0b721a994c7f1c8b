"""A client for a vLLM OpenAI-compatible server: many token-id prompts per `/v1/completions` request,
label log-probabilities keyed by token id, and a loud refusal when any label is missing.

Correct only against a server started with ``--logprobs-mode processed_logprobs``: in the default
``raw_logprobs`` mode the top-K is taken over the whole vocabulary before ``allowed_token_ids`` masks it,
so labels go missing and other tokens stand in their place (README, docs/servers.md). This client never fills a value.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import urllib3
from urllib3.exceptions import HTTPError as TransportError
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as TransportTimeout

from anyjev.errors import BackendError, BatchCollisionError, LabelTokenError, UnauthorizedError, one_line
from anyjev.numbers.logprobs import log_softmax
from anyjev.schema import default, setting
from anyjev.serving.health import bearer, tls_context

log = logging.getLogger(__name__)

FIX_HINT = (
    "Start the vLLM server with `--logprobs-mode processed_logprobs` (vLLM >= 0.10), so that log-probs "
    "are taken after the allowed_token_ids mask; the workflow's server rule pins this flag."
)
# vLLM 0.32's V1 sampler (v1/sample/sampler.py, gather_specific_token_logprobs): when any request of an engine batch
# sets logprob_token_ids, every other request's logprobs become [its sampled token, padding id 0 at -inf (-9999 in the
# response)] (vllm-project/vllm PR 51789; the V2 model runner, which merges per request, needs Triton, absent on CPU).
COLLISION_CAUSE = (
    "this request shared an engine batch with a request that set `logprob_token_ids` (an answer-mass request): vLLM "
    "0.32's V1 sampler then returns every other request's log-probs as that request's gather, only the sampled token "
    "and padding (vllm-project/vllm PR 51789). The server's logprobs mode is not the cause."
)
# vLLM's 400 for a request asking more log-probs than the server's --max-logprobs (vllm/sampling_params.py).
MAX_LOGPROBS_REFUSED = re.compile(r"Requested sample logprobs of (\d+), which is greater than max allowed: (\d+)")
PADDING_ID = 0
MASKED = -9000.0  # the response clamps -inf to -9999
# A processed-logprobs response sums to one over the labels up to float32 rounding.
SUM_TOLERANCE = 1e-3
TOKEN_ID_PREFIX = "token_id:"
JSON_HEADERS = {"Content-Type": "application/json"}
LOCK_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND  # the request lock: created by its first client, never written


@dataclass(frozen=True)
class ClientOptions:
    """How the scoring client talks to a vLLM server (the config's ``client.*``)."""

    prompts_per_request: int = setting("client", "prompts_per_request")
    max_concurrency: int = setting("client", "max_concurrency")
    timeout: float = setting("client", "timeout")
    retries: int = setting("client", "retries")
    chunk_items: int = setting("client", "chunk_items")  # items scored and checkpointed together (the cell loop's)

    @property
    def chunks_in_flight(self) -> int:
        """Chunks of items a cell reads at once (:func:`anyjev.run.full.score_full`): two, so that the next chunk's
        requests are queued while a chunk's last answers come back; one when requests go one at a time anyway."""
        return 2 if self.max_concurrency > 1 else 1


class _Transient(Exception):
    """A failure worth retrying (connection refused/reset, timeout, 5xx)."""


def _quote(text: str, limit: int = 400) -> str:
    """What a server said, for a message: one line, an HTML error page (a proxy's) reduced to its text."""
    return one_line(text, limit)


def _server_message(resp: urllib3.BaseHTTPResponse) -> str:
    text = resp.data.decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return _quote(text)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and "message" in err:
            return _quote(str(err["message"]))
        if "message" in body:
            return _quote(str(body["message"]))
    return _quote(json.dumps(body))


class VLLMBackend:
    """Label log-probabilities from a vLLM server.

    Prompts are sent ``prompts_per_request`` at a time, with at most ``max_concurrency`` requests in
    flight. Every request is greedy and explicit (``temperature=0, top_p=1, top_k=0, min_p=0``,
    ``max_tokens=1``) so a model's ``generation_config.json`` cannot change the numbers. With ``api_key`` every
    request carries it (``Authorization: Bearer``), as a server started with an API key requires.

    Requests go through urllib3's connection pool (``max_concurrency`` kept-alive connections, shared by the request
    threads), which spends less of the job's CPU on a request than httpx's client (docs/benchmarks.md, "The scoring
    job's CPU per prompt"): the batch audit sends a request a prompt, and on a GPU the client's CPU is the run's
    limit. No proxy of the environment is used: 127.0.0.1 is never routed elsewhere.
    """

    name = "vllm"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        prompts_per_request: int = default("client", "prompts_per_request"),
        max_concurrency: int = default("client", "max_concurrency"),
        timeout: float = default("client", "timeout"),
        retries: int = default("client", "retries"),
        backoff: float = 0.5,
        decode: Callable[[int], str] | None = None,
        request_lock: str | os.PathLike[str] | None = None,
        api_key: str | None = None,
    ) -> None:
        if prompts_per_request < 1 or max_concurrency < 1:
            raise ValueError("prompts_per_request and max_concurrency must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/v1/completions"
        self.model = model
        self.prompts_per_request = prompts_per_request
        self.max_concurrency = max_concurrency
        self.retries = retries
        self.backoff = backoff
        self.decode = decode
        self.system_fingerprints: set[str] = set()
        self.requests_sent = 0
        self.batch_collisions = 0  # label requests resent because they shared a batch with logprob_token_ids
        # Shared by every client of one server: label requests hold it shared, answer-mass requests exclusive,
        # so a logprob_token_ids request never shares an engine batch with a label request (see vocab_logprobs).
        self.request_lock = Path(request_lock) if request_lock is not None else None
        self.api_key = api_key  # never in describe(): what a cell records of its client
        self._pool: ThreadPoolExecutor | None = None  # made at the first call with several requests, kept until close
        self._exclusive = False  # this client holds the request lock exclusively (exclusive()): its requests go on
        self._headers = JSON_HEADERS | bearer(api_key)
        self._path = urllib3.util.parse_url(self.url).request_uri  # the pool's requests name the path on its host
        tls = {"ssl_context": tls_context()} if self.url.startswith("https:") else {}
        # retries=False: a failure is raised as it is, and _post retries what is worth retrying, with its backoff.
        self._client = urllib3.connection_from_url(self.url, maxsize=max_concurrency, block=True, retries=False,
                                                   timeout=urllib3.Timeout(connect=10.0, read=timeout), **tls)

    @classmethod
    def from_options(cls, base_url: str, model: str, options: ClientOptions, **kwargs) -> VLLMBackend:
        """A client with the config's ``client.*`` settings (KWARGS: api_key, decode, request_lock)."""
        return cls(base_url, model, prompts_per_request=options.prompts_per_request, max_concurrency=options.max_concurrency,
                   timeout=options.timeout, retries=options.retries, **kwargs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        self._client.close()

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def describe(self) -> dict:
        return {
            "backend": self.name,
            "url": self.base_url,
            "served_model": self.model,
            "prompts_per_request": self.prompts_per_request,
            "max_concurrency": self.max_concurrency,
            "system_fingerprint": sorted(self.system_fingerprints),
            "batch_collisions_resent": self.batch_collisions,
        }

    # -- public ---------------------------------------------------------------------------------
    def label_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int], *,
                       cache_salt: str | None = None) -> np.ndarray:
        """(N, K) log-probs renormalised over the labels (requests restricted by ``allowed_token_ids``). With
        CACHE_SALT (vLLM's per-request prefix-cache salt), no prompt reuses a cached block: each is computed afresh,
        so the same server returns the same values whatever it cached before (the server check's probe)."""
        return self._batched(prompts, self._labels(label_ids), vocab=False, cache_salt=cache_salt)

    def vocab_logprobs(self, prompts: Sequence[Sequence[int]], label_ids: Sequence[int]) -> np.ndarray:
        """(N, K) full-vocabulary log-probs of ``label_ids`` at the next position, not renormalised:
        ``exp`` summed over a row is the answer mass. Greedy requests with no ``allowed_token_ids`` and
        ``logprob_token_ids`` = the labels (vLLM >= 0.32), which returns each label's processed log-prob
        (the full softmax under greedy parameters) whatever its rank; a missing label raises
        :class:`LabelTokenError` naming its id.

        Caution (vLLM 0.32): a logprob_token_ids request turns the label requests of its engine batch into
        their sampled token plus padding (``COLLISION_CAUSE``). Clients that share ``request_lock`` never overlap
        the two kinds (label requests hold it shared, these exclusive); a label request that collides anyway (a
        client outside the lock) is recognised by that signature and resent (:meth:`_request`). The call's requests
        run side by side, the lock held once for all of them (:meth:`exclusive`): two logprob_token_ids requests in one
        engine batch each get their own ids (the sampler pads each request's list to the longest)."""
        labels = self._labels(label_ids)
        with self.exclusive():
            return self._batched(prompts, labels, vocab=True)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """The server to this client's answer-mass requests alone: the request lock held exclusively until the block
        ends (every client that shares it waits), its vocab_logprobs calls inside sent without taking it again. A cell
        reads all its answer masses in one such window instead of one a chunk."""
        if self._exclusive:
            yield
            return
        with self._server_lock(exclusive=True):
            self._exclusive = True
            try:
                yield
            finally:
                self._exclusive = False

    @staticmethod
    def _labels(label_ids: Sequence[int]) -> list[int]:
        labels = [int(i) for i in label_ids]
        if len(set(labels)) != len(labels):
            raise LabelTokenError(f"label ids {labels} are not distinct")
        return labels

    def _batched(self, prompts: Sequence[Sequence[int]], labels: list[int], *, vocab: bool,
                 cache_salt: str | None = None) -> np.ndarray:
        if not prompts:
            return np.zeros((0, len(labels)))
        chunks = [list(range(s, min(s + self.prompts_per_request, len(prompts)))) for s in
                  range(0, len(prompts), self.prompts_per_request)]
        out = np.empty((len(prompts), len(labels)))

        def run(chunk: list[int]) -> None:
            out[chunk] = self._request([prompts[i] for i in chunk], labels, first_index=chunk[0], vocab=vocab,
                                       cache_salt=cache_salt)

        if len(chunks) == 1 or self.max_concurrency == 1:
            for chunk in chunks:
                run(chunk)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_concurrency, thread_name_prefix="vllm-request")
            futures = [self._pool.submit(run, c) for c in chunks]
            wait(futures)  # every request of the call ends before the first error is raised
            for fut in futures:
                fut.result()
        return out

    # -- one request ----------------------------------------------------------------------------
    def request_body(self, prompts: list[Sequence[int]], labels: list[int], vocab: bool = False,
                     cache_salt: str | None = None) -> dict:
        """The /v1/completions body for PROMPTS: greedy, one token, the labels allowed (or, for ``vocab``, named);
        with CACHE_SALT, computed without the prefix cache's earlier blocks."""
        if vocab:  # full-vocabulary values of the labels: nothing masked, labels named explicitly
            payload = self.request_body(prompts, labels, cache_salt=cache_salt) | {"logprob_token_ids": labels}
            del payload["allowed_token_ids"]
            return payload
        salt = {"cache_salt": cache_salt} if cache_salt is not None else {}
        return salt | {
            "model": self.model,
            "prompt": [p if type(p) is list else list(map(int, p)) for p in prompts],
            "max_tokens": 1,
            "temperature": 0.0,
            "top_p": 1.0,
            "top_k": 0,
            "min_p": 0.0,
            "n": 1,
            "logprobs": len(labels),
            "allowed_token_ids": labels,
            "return_tokens_as_token_ids": True,
        }

    @contextlib.contextmanager
    def _server_lock(self, *, exclusive: bool) -> Iterator[None]:
        if self.request_lock is None or self._exclusive:  # held already (exclusive()): nothing else runs meanwhile
            yield
            return
        # A descriptor of its own each time (flock excludes across descriptors, so this client's threads wait on each
        # other as other processes' clients do), opened raw: a request pays two system calls for it, no file object.
        try:
            fd = os.open(self.request_lock, LOCK_FLAGS, 0o644)
        except FileNotFoundError:
            self.request_lock.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.request_lock, LOCK_FLAGS, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)  # which releases the lock

    def _post(self, payload: dict) -> dict:
        attempts = self.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                return self._post_once(payload)
            except _Transient as exc:
                last = str(exc)
                if attempt < attempts:
                    delay = self.backoff * 2 ** (attempt - 1)
                    log.warning("%s: %s; retrying in %.1f s (attempt %d/%d)", self.url, last, delay, attempt, attempts)
                    time.sleep(delay)
        raise BackendError(f"POST {self.url} failed after {attempts} attempts; last error: {last}")

    def _post_once(self, payload: dict) -> dict:
        try:
            resp = self._client.urlopen("POST", self._path, body=orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY),
                                        headers=self._headers, redirect=False)
        except NewConnectionError as exc:  # refused (urllib3 files it under connect timeouts: it is not one)
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        except TransportTimeout as exc:
            raise _Transient(f"timed out ({type(exc).__name__})") from exc
        except TransportError as exc:  # reset, closed without an answer, protocol errors
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc
        self.requests_sent += 1
        status = resp.status
        if status == 401:
            raise UnauthorizedError(f"POST {self.url} answered HTTP 401 ({_server_message(resp)}): the server requires an "
                                    f"API key, and this request carried {'another' if self.api_key else 'none'}")
        if status >= 500:
            raise _Transient(f"HTTP {status}: {_server_message(resp)}")
        if status >= 400:
            said = _server_message(resp)
            if refused := MAX_LOGPROBS_REFUSED.search(said):
                wanted, allowed = refused.groups()
                raise BackendError(f"POST {self.url} answered HTTP {status}: the server returns at most {allowed} "
                                   f"log-probs per token (its --max-logprobs), and these labels need {wanted}: restart it "
                                   f"with `--max-logprobs {wanted}` or more (the server said: {said})")
            raise BackendError(f"POST {self.url} answered HTTP {status}: {said}")
        try:
            return orjson.loads(resp.data)
        except ValueError as exc:
            raise BackendError(f"POST {self.url} returned malformed JSON: "
                               f"{_quote(resp.data.decode('utf-8', 'replace'), 200)!r}") from exc

    def _request(self, prompts: list[Sequence[int]], labels: list[int], first_index: int, vocab: bool = False,
                 cache_salt: str | None = None) -> np.ndarray:
        """One request's (N, K) values. A label request that collided with a logprob_token_ids request is resent,
        holding the request lock exclusively (no client that shares it can collide again), up to ``retries`` times;
        every value kept comes from a response that holds exactly the labels."""
        attempts = self.retries + 1
        for attempt in range(1, attempts + 1):
            with self._server_lock(exclusive=vocab or attempt > 1):
                body = self._post(self.request_body(prompts, labels, vocab, cache_salt))
            try:
                return self._read_response(body, prompts, labels, first_index, vocab)
            except BatchCollisionError as exc:
                self.batch_collisions += 1
                if attempt == attempts:
                    raise BatchCollisionError(f"{exc} Resent {attempts - 1} time(s), colliding each time. "
                                              f"{self._collision_fix()}", missing_ids=exc.missing_ids,
                                              returned_ids=exc.returned_ids) from None
                delay = self.backoff * 2 ** (attempt - 1)
                log.warning("%s; resending the request in %.1f s (attempt %d/%d)", exc, delay, attempt + 1, attempts)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _collision_fix(self) -> str:
        """What to do about a request that collides every time: its cause is a logprob_token_ids request of a client
        outside this client's request lock (every client inside it waits for the lock), whatever this cell's
        scoring.answer_mass."""
        if self.request_lock is None:
            return ("Keep logprob_token_ids (answer-mass) requests off this server while scoring, or score against a "
                    "server of its own.")
        return (f"Every client of this working directory holds {self.request_lock} and never sends the two kinds at once, "
                "so the colliding requests come from a client outside it (another working directory's run, another "
                "program): keep its logprob_token_ids requests off this server while scoring, or score against a server "
                "of its own.")

    def _read_response(self, body: dict, prompts: list[Sequence[int]], labels: list[int], first_index: int,
                       vocab: bool) -> np.ndarray:
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or len(choices) != len(prompts):
            got = len(choices) if isinstance(choices, list) else "no"
            raise BackendError(f"POST {self.url}: {got} choices for {len(prompts)} prompts (response: {_quote(json.dumps(body), 300)})")
        if fp := body.get("system_fingerprint"):
            self.system_fingerprints.add(str(fp))
        if not vocab:
            values = self._label_rows(choices, labels)
            if values is not None:
                return values
        out = np.empty((len(prompts), len(labels)))
        seen: set[int] = set()
        for pos, choice in enumerate(choices):
            idx = choice.get("index", pos)
            if not isinstance(idx, int) or not 0 <= idx < len(prompts) or idx in seen:
                raise BackendError(f"POST {self.url}: choice index {idx!r} does not map to one of {len(prompts)} prompts")
            seen.add(idx)
            read = self._read_vocab if vocab else self.read_labels
            out[idx] = read(choice, labels, prompt_number=first_index + idx)
        return out

    @staticmethod
    def _label_rows(choices: list, labels: list[int]) -> np.ndarray | None:
        """The label log-probs of a response whose every choice is as it must be (index i at position i, exactly the
        labels, finite, unmasked, summing to one), all at once: what :meth:`read_labels` gives each. None at the first
        sign of anything else, which :meth:`read_labels`, choice by choice, then names."""
        keys = [TOKEN_ID_PREFIX + str(i) for i in labels]
        rows = []
        try:
            for pos, choice in enumerate(choices):
                top = choice["logprobs"]["top_logprobs"][0]
                if choice.get("index", pos) != pos or len(top) != len(keys):
                    return None
                rows.append([top[k] for k in keys])
            values = np.array(rows, dtype=np.float64)
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            return None
        if values.ndim != 2 or not np.all(np.isfinite(values)) or np.any(values <= -9000):
            return None
        if np.any(np.abs(np.logaddexp.reduce(values, axis=1)) > SUM_TOLERANCE):
            return None
        return log_softmax(values)

    def _returned(self, choice: dict, prompt_number: int) -> dict[int, float]:
        """``top_logprobs[0]`` of one choice, keyed by token id."""
        try:
            top = choice["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError) as exc:
            shown = _quote(json.dumps(choice), 300)
            raise BackendError(f"prompt {prompt_number}: response has no logprobs.top_logprobs[0]: {shown}") from exc
        returned: dict[int, float] = {}
        for key, value in (top or {}).items():
            if not key.startswith(TOKEN_ID_PREFIX):
                raise BackendError(
                    f"prompt {prompt_number}: top_logprobs key {key!r} is not 'token_id:<id>'; the server ignored "
                    "return_tokens_as_token_ids (needs vLLM >= 0.10)"
                )
            returned[int(key[len(TOKEN_ID_PREFIX):])] = float(value)
        return returned

    def _read_vocab(self, choice: dict, labels: list[int], prompt_number: int) -> np.ndarray:
        returned = self._returned(choice, prompt_number)
        missing = [i for i in labels if i not in returned]
        if missing:
            raise LabelTokenError(
                f"prompt {prompt_number}: the server returned no full-vocabulary log-prob for label ids "
                f"{self._text(missing)} (asked with logprob_token_ids {labels}; needs vLLM >= 0.32). Returned: "
                f"{self._text(list(returned))}.", missing_ids=missing, returned_ids=list(returned))
        values = np.array([returned[i] for i in labels])
        if not np.all(np.isfinite(values)) or np.any(values > 1e-4):
            raise LabelTokenError(f"prompt {prompt_number}: full-vocabulary log-probs {values.tolist()} of label ids "
                                  f"{labels} are not log-probabilities", returned_ids=list(returned))
        return values

    def read_labels(self, choice: dict, labels: list[int], prompt_number: int) -> np.ndarray:
        """One choice's label log-probs, refusing (LabelTokenError) a missing, extra, masked or unnormalised label."""
        returned = self._returned(choice, prompt_number)
        missing = [i for i in labels if i not in returned]
        extra = [i for i in returned if i not in set(labels)]
        if missing and collided(returned, labels):
            sampled = self._text([i for i in returned if i != PADDING_ID])
            raise BatchCollisionError(f"prompt {prompt_number}: the server returned only label {sampled} and padding id "
                                      f"{PADDING_ID} for the label ids {labels}: {COLLISION_CAUSE}",
                                      missing_ids=missing, returned_ids=list(returned))
        if missing or extra:
            raise LabelTokenError(self._missing_message(prompt_number, labels, missing, returned), missing_ids=missing,
                                  returned_ids=list(returned))
        values = np.array([returned[i] for i in labels])
        if not np.all(np.isfinite(values)) or np.any(values <= -9000):
            raise LabelTokenError(f"prompt {prompt_number}: label log-probs {values.tolist()} include masked values. {FIX_HINT}")
        total = float(np.logaddexp.reduce(values))
        if abs(total) > SUM_TOLERANCE:
            raise LabelTokenError(
                f"prompt {prompt_number}: the log-probs of label ids {labels} sum to probability {math.exp(total):.4f}, "
                f"not 1: they were not renormalised over the allowed labels. {FIX_HINT}",
                returned_ids=list(returned),
            )
        return log_softmax(values)

    def _text(self, ids: Sequence[int]) -> str:
        if self.decode is None:
            return ", ".join(str(i) for i in ids)
        return ", ".join(f"{i} ({self.decode(i)!r})" for i in ids)

    def _missing_message(self, prompt_number: int, labels: list[int], missing: list[int], returned: dict[int, float]) -> str:
        parts = [f"prompt {prompt_number}: the server's top_logprobs do not hold exactly the label ids {labels}."]
        if missing:
            parts.append(f"Missing label ids: {self._text(missing)}.")
        parts.append(f"Returned instead: {self._text(list(returned))}.")
        parts.append("No value is filled in for a missing label.")
        parts.append(FIX_HINT)
        return " ".join(parts)


def collided(returned: dict[int, float], labels: Sequence[int]) -> bool:
    """Whether a label response is what vLLM 0.32 returns to a request that shared an engine batch with a
    ``logprob_token_ids`` request: exactly one label (the sampled token) and padding id 0 at -inf, nothing else."""
    present = [i for i in labels if i in returned]
    others = {i: v for i, v in returned.items() if i not in present}
    return len(labels) > 1 and len(present) == 1 and set(others) == {PADDING_ID} and others[PADDING_ID] <= MASKED
