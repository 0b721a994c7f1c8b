"""What a stand-in vLLM server answers (stdlib only): label log-probs that are a deterministic function of the prompt
ids, renormalised over the labels as ``--logprobs-mode processed_logprobs`` gives them, in vLLM's ``text_completion``
shape keyed ``token_id:<id>`` (``return_tokens_as_token_ids``); the model list, and the counters of ``/metrics`` a cell
records. :mod:`testbed.vllm_server` (a process) and tests/stub_http.py (in the test's own process) answer with them."""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler

FINGERPRINT = "stub-fp-1"
# The routes vLLM 0.32 guards with its API key (vllm/entrypoints/serve/middleware/authenticate.py); /health, /version
# and /metrics stay open.
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")
UNAUTHORIZED = '{"error": "Unauthorized"}'  # vLLM's 401 body


def refused(path: str, authorization: str | None, api_key: str | None) -> bool:
    """Whether a server started with API_KEY (None: without one) answers a request for PATH with 401, as vLLM does."""
    return bool(api_key) and path.startswith(GUARDED_PREFIXES) and authorization != f"Bearer {api_key}"


def model_logprobs(prompt: Sequence[int], labels: Sequence[int]) -> list[float]:
    """Log-probs over ``labels`` that differ per prompt and per label (sum to one over the labels)."""
    logits = []
    for lab in labels:
        digest = hashlib.sha256(f"{list(prompt)}|{lab}".encode()).digest()
        logits.append(int.from_bytes(digest[:4], "big") / 2**32 * 6.0)
    m = max(logits)
    z = m + math.log(sum(math.exp(x - m) for x in logits))
    return [x - z for x in logits]


def answer_mass(prompt: Sequence[int]) -> float:
    """The probability the labels hold in the full vocabulary after PROMPT, between 0.2 and 0.9."""
    digest = hashlib.sha256(f"{list(prompt)}|mass".encode()).digest()
    return 0.2 + 0.7 * int.from_bytes(digest[:4], "big") / 2**32


def completion(payload: dict, *, shift: float = 0.0, fingerprint: str | None = FINGERPRINT) -> dict:
    """A vLLM-shaped ``text_completion`` answer to ``payload`` (one choice per prompt, in prompt order). SHIFT moves
    the first label's logit (another server: another dtype, say); FINGERPRINT None leaves it out (vLLM's
    ``--fingerprint-mode none``). An answer-mass request (``logprob_token_ids``, no ``allowed_token_ids``) gets
    full-vocabulary log-probs: the same values plus ``log(answer_mass(prompt))``."""
    vocab = "allowed_token_ids" not in payload  # an answer-mass request names its labels in logprob_token_ids
    labels = [int(i) for i in payload["logprob_token_ids" if vocab else "allowed_token_ids"]]
    choices = []
    for index, prompt in enumerate(payload["prompt"]):
        lps = model_logprobs(prompt, labels)
        if vocab:  # full-vocabulary values: the labels hold a share of the probability, not all of it
            lps = [lp + math.log(answer_mass(prompt)) for lp in lps]
        if shift:
            logits = [lp + (shift if j == 0 else 0.0) for j, lp in enumerate(lps)]
            z = max(logits) + math.log(sum(math.exp(x - max(logits)) for x in logits))
            lps = [x - z for x in logits]
        best = max(range(len(labels)), key=lambda j: lps[j])
        key = f"token_id:{labels[best]}"
        choices.append({
            "index": index,
            "text": key,
            "logprobs": {
                "text_offset": [0],
                "token_logprobs": [lps[best]],
                "tokens": [key],
                "top_logprobs": [{f"token_id:{lab}": lp for lab, lp in zip(labels, lps, strict=True)}],
            },
            "finish_reason": "length",
            "stop_reason": None,
            "prompt_logprobs": None,
        })  # fmt: skip
    return {
        "id": "cmpl-stub",
        "object": "text_completion",
        "created": int(time.time()),
        "model": payload.get("model"),
        "choices": choices,
        "system_fingerprint": fingerprint,
        "usage": {"prompt_tokens": sum(len(p) for p in payload["prompt"]), "completion_tokens": len(choices)},
    }


def models(served_names: Sequence[str], root: str, max_model_len: int | None) -> dict:
    """``GET /v1/models``: a card per served name, with the model folder and the context when given."""
    cards = [{"id": name, "object": "model", "root": root} | ({"max_model_len": max_model_len} if max_model_len else {})
             for name in served_names]
    return {"object": "list", "data": cards}


def metrics_text(served: str, prompt_tokens: int, requests_ok: int, block_size: int, prefix_caching: bool) -> str:
    """``GET /metrics``: the prompt-token and request counters and the KV-cache settings a cell records."""
    label = f'model_name="{served}"'
    return "\n".join([
        f"vllm:prompt_tokens_total{{{label}}} {prompt_tokens}",
        f"vllm:prefix_cache_queries_total{{{label}}} {prompt_tokens if prefix_caching else 0}",
        f"vllm:prefix_cache_hits_total{{{label}}} 0",
        f'vllm:request_success_total{{finished_reason="length",{label}}} {requests_ok}',
        f"vllm:num_requests_running{{{label}}} 0",
        f"vllm:num_requests_waiting{{{label}}} 0",
        f'vllm:cache_config_info{{block_size="{block_size}",cache_dtype="auto",enable_prefix_caching="{prefix_caching}"}} 1.0',
    ]) + "\n"  # fmt: skip


def send(handler: BaseHTTPRequestHandler, code: int, text: str, kind: str = "application/json") -> None:
    """An answer of TEXT with its length (the connection is kept), unless the client has gone."""
    data = text.encode("utf-8")
    try:
        handler.send_response(code)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
        handler.close_connection = True


def not_here(path: str) -> str:
    return json.dumps({"error": {"message": f"no {path} here"}})
