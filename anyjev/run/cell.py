"""The score job of one (model, task) cell: reach the model's server (a leased managed server, or the user's URL),
score every item with resume, and write the cell's provenance."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.backends.vllm import ClientOptions, VLLMBackend
from anyjev.data.taskfile import load_task_file
from anyjev.decision.labels import check_label_capacity
from anyjev.decision.tokenizer import Tokenizers
from anyjev.errors import BackendError, ConfigError, UnauthorizedError
from anyjev.files import file_sha256, now_iso, writable_folder, write_json_atomic
from anyjev.jobs import Job, to_data
from anyjev.run import provenance
from anyjev.run.audit import BatchAudit
from anyjev.run.context import check_prompt_lengths
from anyjev.run.identity import ScoringOptions, scoring_identity
from anyjev.run.prepared import prepare_items
from anyjev.run.rendered import RenderedCell
from anyjev.run.scoring import cell_probes, finish_from_checkpoint, score_cell
from anyjev.run.server_check import ServerGuard
from anyjev.rundata.scores import scored_under
from anyjev.serving.build import resolve_server
from anyjev.serving.describe import describe_server
from anyjev.serving.metrics import CacheCounters, read_counters, settled_counters
from anyjev.serving.spec import ServerSpec, check_server_python

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManagedServer:
    """A server the workflow starts for the model (or reuses, once per run, through the lease in ``state_dir``),
    logging to ``log``."""

    spec: ServerSpec
    log: str
    state_dir: str

    @property
    def request_lock(self) -> Path:
        return request_lock(self.state_dir, self.spec.name)


@dataclass(frozen=True)
class ExternalServer:
    """A vLLM server the user runs (``source: url``); other clients may share it. ``api_key_env`` names the environment
    variable holding its API key (the job holds the name, never the key)."""

    url: str
    served_name: str
    state_dir: str
    api_key_env: str | None = None

    @property
    def request_lock(self) -> Path:
        return request_lock(self.state_dir, "url-" + hashlib.sha256(self.url.rstrip("/").encode()).hexdigest()[:16])

    def api_key(self) -> str | None:
        """The key, read from the environment now (when a job starts); None when no variable is named, or it is unset."""
        return api_key_from_env(self.api_key_env)

    def key_refused(self, model: str) -> ConfigError:
        """The one line for a 401 from this server: which variable MODEL names for its key, and whether it is set."""
        said = f"the server at {self.url} answered 401 Unauthorized"
        if self.api_key_env is None:
            return ConfigError(f"models.{model}.api_key_env", f"is not set, and {said}: it requires an API key; set "
                               "api_key_env to the name of the environment variable that holds it")
        if self.api_key() is None:
            return ConfigError(f"models.{model}.api_key_env", f"names {self.api_key_env}, which is not set in this job's "
                               f"environment, and {said}: set {self.api_key_env} to the server's key where the run starts")
        return ConfigError(f"models.{model}.api_key_env", f"names {self.api_key_env}, which is set, but {said} to its "
                           f"value: set {self.api_key_env} to the key the server was started with")


def api_key_from_env(name: str | None) -> str | None:
    """The value of environment variable NAME (a url model's ``api_key_env``); None when NAME is None or unset."""
    return (os.environ.get(name) or None) if name else None


def request_lock(state_dir: str, server: str) -> Path:
    """The lock every client of one server shares, here and on every node that sees STATE_DIR: answer-mass requests
    must not share an engine batch with label requests (:meth:`anyjev.backends.vllm.VLLMBackend.vocab_logprobs`)."""
    return Path(state_dir) / f"{server}.requests.lock"


@dataclass(frozen=True)
class ScoreJob(Job):
    """Everything a score job needs besides its files (built by ``Settings.score_job``): the model's tokenizer, how
    the client talks to the server, what the cell reads, and its server (managed or external)."""

    model: str
    task: str
    tokenizer: str
    client: ClientOptions
    scoring: ScoringOptions
    managed: ManagedServer | None
    external: ExternalServer | None

    def __post_init__(self) -> None:
        if (self.managed is None) == (self.external is None):
            raise ConfigError(f"models.{self.model}.source", "a score job needs exactly one server: managed or url")

    def resolved(self) -> ScoreJob:
        """This job with its managed server's dtype, block size and prefix caching as this machine's server runs them
        (:func:`~anyjev.serving.build.resolve_server`), which the cell's identity records; a url job as it is."""
        if self.managed is None:
            return self
        return dataclasses.replace(self, managed=dataclasses.replace(self.managed, spec=resolve_server(self.managed.spec)))

    def model_identity(self) -> dict[str, Any]:
        """What identifies the model's scores (part of the cell's identity)."""
        if self.managed is None:
            assert self.external is not None
            return {"backend": "vllm", "url": self.external.url, "served_name": self.external.served_name}
        spec = self.managed.spec
        return {"backend": "vllm", "model": spec.model, "dtype": spec.dtype, "served_name": spec.served_name,
                "server_flags": list(spec.server_flags), "max_model_len": spec.max_model_len, "seed": spec.seed,
                "prefix_caching": spec.prefix_caching, "block_size": spec.block_size, "fp32_head": spec.fp32_head}


def check_task_label_capacity(task, max_logprobs: int) -> None:
    """Before any server starts: every item's labels must fit in one request's logprobs."""
    worst = max(task.items, key=lambda it: len(it.question.options))
    check_label_capacity(task.name, len(worst.question.options), max_logprobs, item=worst.id)


def check_max_model_len(max_model_len: int | None, model_dir: str | os.PathLike[str], model: str,
                        server_env: dict[str, str] | None = None) -> None:
    """Before a server starts: a max_model_len above the model's own context is refused naming the key, as vLLM would
    refuse it only after loading. Only the plain case is judged: config.json's ``max_position_embeddings`` with no RoPE
    scaling (a scaling factor or a non-default RoPE type stretches it) and no ``model_max_length`` above it;
    VLLM_ALLOW_LONG_MAX_MODEL_LEN in the server's environment lets it through, as it lets vLLM."""
    config = Path(model_dir) / "config.json"
    if max_model_len is None or not config.is_file() or (server_env or {}).get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        return
    hf = json.loads(config.read_text())
    own = hf.get("max_position_embeddings")
    rope = [r for r in (hf.get("rope_scaling"), hf.get("rope_parameters")) if isinstance(r, dict)]
    stretched = any("factor" in r or r.get("rope_type", r.get("type", "default")) != "default" for r in rope)
    if not isinstance(own, int) or stretched:
        return
    if max_model_len > max(own, hf.get("model_max_length") or 0):
        raise ConfigError(f"models.{model}.max_model_len",
                          f"{max_model_len} is more than the model's own context, {own} tokens (max_position_embeddings "
                          f"in {config}); vLLM would refuse to start. Set it to {own} or less")


def context_length(spec_max_model_len: int | None, model_dir: str | os.PathLike[str]) -> int | None:
    """The context the server will have: the configured max_model_len, else the model's own (config.json)."""
    if spec_max_model_len is not None:
        return spec_max_model_len
    config = Path(model_dir) / "config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("max_position_embeddings")


def server_counters(url: str, served: str, api_key: str | None, expected_requests: float | None = None) -> CacheCounters | None:
    """The managed server's own request and prompt-token counters (vLLM's /metrics), read around a cell so that what
    the server saw can be compared with what the cell sent and what `anyjev plan` counts: an independent count (asked
    with the run's API_KEY, which the server's key guard wants on /metrics too). With
    EXPECTED_REQUESTS, read once the server has counted that many or has settled (:func:`settled_counters`). None (and
    a warning) when /metrics cannot be read."""
    try:
        if expected_requests is None:
            return read_counters(url, served, api_key=api_key)
        return settled_counters(url, served, expected_requests=expected_requests, api_key=api_key)
    except BackendError as exc:
        log.warning("the server's counters are not recorded: %s", exc)
        return None


# What a cell sends besides its items' prompts (counts["prompts"]), each counted apart: the canary, the server check's
# probes, the batch audit's reads.
EXTRA_COUNTS = ("canary", "server_check", "audit")


def server_saw(before: CacheCounters, after: CacheCounters, counts: dict[str, Any]) -> dict[str, Any]:
    """What the server counted between BEFORE and AFTER beside what the cell sent (its prompts and EXTRA_COUNTS');
    ``matches`` is False, and a warning says so, when they differ (another client on the server, or
    a request the server did not count)."""
    saw = {"requests_ok": int(after.requests_ok - before.requests_ok),
           "prompt_tokens": int(after.prompt_tokens - before.prompt_tokens)}
    extra = [counts[key] for key in EXTRA_COUNTS if key in counts]
    sent = {"requests_ok": counts["prompts"] + sum(e["prompts"] for e in extra)}
    if "prompt_tokens" in counts:  # an adaptive cell does not count its tokens
        sent["prompt_tokens"] = counts["prompt_tokens"] + sum(e["prompt_tokens"] for e in extra)
    differs = {k: (sent[k], saw[k]) for k in sent if sent[k] != saw[k]}
    if differs:
        log.warning("the server counted %s where the cell sent %s",
                    ", ".join(f"{saw[k]} {k}" for k in differs), ", ".join(f"{sent[k]}" for k in differs))
    return saw | {"sent": sent, "matches": not differs}


def cell_identity(job: ScoreJob, task, task_path: str | os.PathLike[str]) -> dict[str, Any]:
    """The identity a cell's scores are recorded (and resumed) under."""
    return {"task": task.name, "task_sha256": file_sha256(task_path), "model": job.model_identity(),
            "model_source": provenance.model_source(job.tokenizer), **scoring_identity(job.scoring)}


def score_job(job: ScoreJob, task_path: str | os.PathLike[str], out: str | os.PathLike[str],
              provenance_path: str | os.PathLike[str] | None, owner_pid: int, *,
              tokenizers: Tokenizers | None = None, rendered: RenderedCell | None = None) -> dict[str, Any]:
    """Score the cell described by JOB into OUT; returns the scoring counts. TOKENIZERS: the tokenizers (and their label
    checks) already loaded by the job that scores the model's other cells, which a cell of the same tokenizer reuses.
    RENDERED: the cell's prompts rendered ahead (:mod:`anyjev.run.rendered`) from what this job would render them
    from; the job then loads no tokenizer unless an error names a token (its text is decoded)."""
    started, t0 = now_iso(), time.monotonic()
    job = job.resolved()
    task = load_task_file(task_path)
    tokenizers = tokenizers or Tokenizers()
    identity = cell_identity(job, task, task_path)
    if scored_under(out, identity) and (provenance_path is None or Path(provenance_path).is_file()):
        # A job that scores several cells (score_jobs: model) and is rerun skips the cells it already finished,
        # without starting a server for them.
        log.info("%s is already scored under this identity: nothing to send", out)
        n = len(task.items)
        return {"items": n, "scored": 0, "resumed": n, "prompts": 0}
    # Before any server starts: the folders the cell's files go to can be written (else every item would be scored,
    # and its final write fail).
    for path in (out, provenance_path):
        if path is not None:
            writable_folder(path)
    # Every item's layouts rendered and its labels checked before any server starts: a label that is not one token,
    # or a prompt longer than the context, fails the cell at once; scoring sends exactly these prompts.
    if rendered is not None:
        prepared, probes = rendered.prepared, rendered.probes
    else:
        tok, checker = tokenizers.get(job.tokenizer)
        prepared = prepare_items(tok, task.items, task.prior_groups(), job.scoring.prompt, checker=checker)
        probes = cell_probes(tok, prepared, job.scoring, None)
    finished = finish_from_checkpoint(None, prepared, str(out), identity, options=job.scoring, probes=probes)
    if finished is not None:
        counts, recorded = finished
        log.info("%s: every item was checkpointed: written without a server", out)
        if provenance_path:
            server = ({"spec": job.managed.spec.to_dict()} if job.managed is not None else
                      {"url": job.external.url, "served_name": job.external.served_name, "external": True})
            recorded = recorded or {}
            server |= {"from_checkpoint": True, "identity": recorded, "system_fingerprint": recorded.get("fingerprints", []),
                       "vllm_version": recorded.get("description", {}).get("vllm_version")}
            write_json_atomic(provenance_path, provenance.cell_record(
                job=to_data(job), task=task, task_path=Path(task_path), identity=identity, server=server,
                backend={"requests": 0}, started=started, seconds=time.monotonic() - t0, counts=counts))
        return counts
    handle = None
    if job.managed is not None:
        from anyjev.serving.lease import acquire_server

        spec = job.managed.spec
        check_task_label_capacity(task, spec.max_logprobs)
        check_server_python(spec.python)  # again here: on a cluster, on the node that starts it
        check_max_model_len(spec.max_model_len, spec.model, job.model, dict(spec.server_env))
        limit = context_length(spec.max_model_len, spec.model)
        if limit is not None:
            longest = check_prompt_lengths(prepared, limit, source=task_path, model=job.model,
                                           origin=task.source.get("origin"))
            log.info("longest prompt: %d tokens (context %d)", longest, limit)
        handle = acquire_server(spec, state_dir=job.managed.state_dir, owner_pid=owner_pid, log_path=job.managed.log)
        url, served, api_key = handle.url, handle.served_name, handle.api_key
        # the server required a key (its own, fresh for the run): recorded, the key never
        server_record: dict[str, Any] = handle.to_dict() | {"spec": spec.to_dict(), "api_key_required": bool(handle.api_key_file)}
        lock = job.managed.request_lock
    else:
        external = job.external
        assert external is not None
        url, served, api_key = external.url, external.served_name, external.api_key()
        if external.api_key_env and api_key is None:
            log.warning("models.%s.api_key_env names %s, which is not set: requests carry no key", job.model,
                        external.api_key_env)
        server_record = {"url": url, "served_name": served, "external": True, "api_key_env": external.api_key_env,
                         "api_key_sent": api_key is not None}
        lock = external.request_lock
        # The user's server says its own context: every prompt is checked against it before the first request.
        try:
            limit = describe_server(url, served, api_key=api_key).max_model_len
        except UnauthorizedError:
            raise external.key_refused(job.model) from None
        if limit is not None:
            check_prompt_lengths(prepared, limit, source=task_path, model=job.model, origin=task.source.get("origin"),
                                 limit_name=f"the context of the server at {url} (its --max-model-len)")
    backend = VLLMBackend.from_options(url, served, job.client, api_key=api_key,
                                       decode=lambda i: tokenizers.get(job.tokenizer)[0].decode([i]),
                                       request_lock=lock)
    guard = ServerGuard(backend, prepared[0], where=f"{job.model}/{job.task}") if prepared else None
    before = server_counters(url, served, api_key) if handle is not None else None
    try:
        counts = score_cell(backend, None, prepared, str(out), identity, options=job.scoring, probes=probes,
                            chunk_items=job.client.chunk_items, chunks_in_flight=job.client.chunks_in_flight, guard=guard,
                            audit=BatchAudit(backend, job.scoring.audit) if job.scoring.audit else None)
    except UnauthorizedError:
        if job.external is not None:
            raise job.external.key_refused(job.model) from None
        raise
    except BackendError:
        if handle is not None:
            handle.check_alive()  # raises ServerError (exit code, log tail) when the server itself is gone
        raise
    finally:
        backend.close()  # its connections and request threads (what it recorded stays readable)
    if before is not None:
        sent = counts["prompts"] + sum(counts[key]["prompts"] for key in EXTRA_COUNTS if key in counts)
        after = server_counters(url, served, api_key, expected_requests=before.requests_ok + sent)
        if after is not None:
            counts["server_saw"] = server_saw(before, after, counts)
    if provenance_path:
        server_record.setdefault("system_fingerprint", sorted(backend.system_fingerprints))
        if guard is not None and guard.reference is not None:
            server_record["identity"] = guard.reference.to_dict()
        write_json_atomic(provenance_path, provenance.cell_record(
            job=to_data(job), task=task, task_path=Path(task_path), identity=identity, server=server_record,
            backend=backend.describe(), started=started, seconds=time.monotonic() - t0, counts=counts,
        ))
    log.info("scored %s: %s", out, counts)
    return counts
