"""Scoring one (model, task) cell as the workflow's score job does: reach the model's server (a leased managed
server, or the user's URL), score every item with resume, and write the cell's provenance."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from anyjev.config import check_server_python
from anyjev.data.tasks import load_task_file
from anyjev.errors import BackendError, ConfigError
from anyjev.files import file_sha256, now_iso, write_json_atomic
from anyjev.run import provenance, scoring
from anyjev.run.context import check_prompt_lengths
from anyjev.run.store import scored_under
from anyjev.settings import ClientSettings, ScoringSettings, from_mapping

log = logging.getLogger(__name__)


def load_tokenizer(path: str | os.PathLike[str]):
    """The model's tokenizer (transformers), loaded once per job."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def check_label_capacity(task, max_logprobs: int) -> None:
    """Before any server starts: every item's labels must fit in one request's logprobs."""
    worst = max(task.items, key=lambda it: len(it.question.options))
    k = len(worst.question.options)
    if k > max_logprobs:
        raise ConfigError("server.max_logprobs", f"is {max_logprobs}, but task {task.name!r} item {worst.id!r} has {k} "
                          f"options: a request reads K label log-probs at once; set server.max_logprobs >= {k}")


def context_length(spec_max_model_len: int | None, model_dir: str | os.PathLike[str]) -> int | None:
    """The context the server will have: the configured max_model_len, else the model's own (config.json)."""
    if spec_max_model_len is not None:
        return spec_max_model_len
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("max_position_embeddings")


def score_job(job: dict[str, Any], task_path: str | os.PathLike[str], out: str | os.PathLike[str],
              provenance_path: str | os.PathLike[str] | None, owner_pid: int) -> dict[str, int]:
    """Score the cell described by JOB (``Settings.score_job``) into OUT; returns the scoring counts."""
    from anyjev.backends.vllm import VLLMBackend

    started, t0 = now_iso(), time.monotonic()
    task = load_task_file(task_path)
    client = from_mapping(ClientSettings, job["client"], "client")
    options = from_mapping(ScoringSettings, job["scoring"], "scoring")
    tokenizer = load_tokenizer(job["tokenizer"])
    if "server" in job:
        from anyjev.serving.spec import ServerSpec

        spec = ServerSpec.from_dict(job["server"])
        model_id: dict[str, Any] = {"backend": "vllm", "model": spec.model, "dtype": spec.dtype,
                                    "served_name": spec.served_name, "server_flags": list(spec.server_flags),
                                    "max_model_len": spec.max_model_len, "seed": spec.seed,
                                    "prefix_caching": spec.prefix_caching, "fp32_head": spec.fp32_head}
    else:
        model_id = {"backend": "vllm", "url": job["url"], "served_name": job["served_name"]}
    identity = {
        "task": task.name,
        "task_sha256": file_sha256(task_path),
        "model": model_id,
        "model_source": provenance.model_source(job["tokenizer"]),
        "layouts": {"permute": True, "flip": True},
        **scoring.scoring_identity(options, content_free=job.get("content_free", False)),
    }
    if scored_under(out, identity) and (provenance_path is None or Path(provenance_path).is_file()):
        # A job that scores several cells (score_jobs: model) and is rerun skips the cells it already finished,
        # without starting a server for them.
        log.info("%s is already scored under this identity: nothing to send", out)
        n = len(task.items)
        return {"items": n, "scored": 0, "resumed": n, "prompts": 0}
    handle = None
    if "server" in job:
        from anyjev.serving.lease import acquire_server

        check_label_capacity(task, spec.max_logprobs)
        check_server_python(spec.python)  # again here: on a cluster, on the node that starts it
        limit = context_length(spec.max_model_len, spec.model)
        if limit is not None:
            longest = check_prompt_lengths(task.items, tokenizer, limit, source=task_path, model=job["model"],
                                           profile=options.prompt_profile)
            log.info("longest prompt: %d tokens (context %d)", longest, limit)
        handle = acquire_server(spec, state_dir=job["state_dir"], owner_pid=owner_pid, log_path=job["server_log"])
        url, served = handle.url, handle.served_name
        server_record: dict[str, Any] = handle.to_dict() | {"spec": job["server"]}
    else:
        url, served = job["url"], job["served_name"]
        server_record = {"url": url, "served_name": served, "external": True}
    # Every cell of a managed server shares its request lock (answer-mass requests must not share a batch).
    request_lock = Path(job["state_dir"]) / f"{job['model']}.requests.lock" if "server" in job else None
    backend = VLLMBackend(url, served, prompts_per_request=client.prompts_per_request, max_concurrency=client.max_concurrency,
                          timeout=client.timeout, retries=client.retries, decode=lambda i: tokenizer.decode([i]),
                          request_lock=request_lock)
    try:
        counts = scoring.score_cell(backend, tokenizer, task.items, task.prior_groups(), str(out), identity,
                                    chunk_items=client.chunk_items, options=options,
                                    content_free=job.get("content_free", False))
    except BackendError:
        if handle is not None:
            handle.check_alive()  # raises ServerError (exit code, log tail) when the server itself is gone
        raise
    if provenance_path:
        server_record.setdefault("system_fingerprint", sorted(backend.system_fingerprints))
        write_json_atomic(provenance_path, provenance.cell_record(
            job=job, task=task, task_path=Path(task_path), identity=identity, server=server_record,
            backend=backend.describe(), started=started, seconds=time.monotonic() - t0, counts=counts,
        ))
    log.info("scored %s: %s", out, counts)
    return counts
