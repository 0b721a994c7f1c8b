"""Hub tasks: a hub dataset fetched once at a pinned revision, then built offline from a declaration.

Two steps, so that scoring never needs the network:

1. :func:`fetch` (its own workflow rule, on a machine with network) downloads the hub splits a task reads with
   ``datasets.load_dataset(dataset, config, split=..., revision=...)`` and writes them unchanged (same columns, same
   label encodings) to a local cache::

       <cache_dir>/<name>/meta.json       dataset id, config, requested revision, resolved commit sha,
                                           datasets version, per split: file, rows, sha256;
                                           label_names: the names of every ClassLabel column
       <cache_dir>/<name>/<split>.jsonl   one JSON object per hub row, in hub order

   A cache whose meta.json has the same dataset, config and revision and every split is reused without network.
   To use the tasks offline: ``snakemake --until fetch_hub_task`` on a machine with network, then copy
   ``resources/hub/<name>`` over. The commit is recorded in the run's lock file (:mod:`anyjev.lock`).

   A dataset in a local folder (:mod:`anyjev.data.local`) has no commit: meta.json records, under ``local``, the
   sha256 of each of its files and their content hash, the lock file that hash, and the cache is reused only while
   the folder's content is the same (read again otherwise).
2. :func:`build` turns the cached files into a :class:`~anyjev.data.tasks.Task` with the standard library only, by the
   task's declaration (:mod:`anyjev.data.declared`).

A task is a declaration: the config's own (``tasks.<name>.hub``, cached under the task's name) or one of the
published tasks (``banking20``, ``newsgroups``, ``injection``, ``massive_route``, ``clinc_escalate``), declared in
``anyjev/data/published_tasks.yaml`` in the same format and cached under their names. A task with one question uses
prior_group = "question"; one whose rows ask their own questions or give their own options, "task".
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from anyjev.data.declared import HubDataset, HubTaskDeclaration, declaration_from_data
from anyjev.data.hub_items import CachedSplit, build_items
from anyjev.data.local import local_content, local_files
from anyjev.data.row_options import row_items
from anyjev.data.tasks import Task
from anyjev.errors import TaskDataError
from anyjev.files import file_sha256
from anyjev.jobs import Job
from anyjev.lock import Lock, resolve_commit

PUBLISHED_FILE = "published_tasks.yaml"
META_FILE = "meta.json"  # a fetched dataset's record, in its cache folder (the fetch step's output)


@functools.cache
def _published() -> dict[str, HubTaskDeclaration]:
    data = yaml.safe_load(resources.files("anyjev.data").joinpath(PUBLISHED_FILE).read_text(encoding="utf-8"))
    return {name: declaration_from_data(d, f"anyjev/data/{PUBLISHED_FILE}: {name}") for name, d in data.items()}


def published() -> dict[str, HubTaskDeclaration]:
    """The published tasks' declarations by name (``anyjev/data/published_tasks.yaml``)."""
    return dict(_published())


def declaration(task_name: str, revision: str | None = None) -> HubTaskDeclaration:
    """A published task's declaration, at REVISION when one is given."""
    tasks = _published()
    if task_name not in tasks:
        raise TaskDataError(f"<hub task {task_name}>", "name", f"unknown hub task; known: {sorted(tasks)}")
    return tasks[task_name].at_revision(revision)


def configured(name: str, builtin: str | None, revision: str | None, declared: HubTaskDeclaration | None
               ) -> tuple[str, HubTaskDeclaration]:
    """The cache folder and the declaration of the hub task NAME as a config gives it: its own declaration (DECLARED,
    cached under NAME), or the published task BUILTIN (else NAME, cached under that name) at REVISION when given."""
    if declared is not None:
        return name, declared
    published_name = builtin or name
    return published_name, declaration(published_name, revision)


def _describe(ds: HubDataset) -> str:
    cfg = f", config {ds.config!r}" if ds.config else ""
    if ds.local:
        return f"local dataset folder {ds.dataset!r}{cfg}"
    return f"hub dataset {ds.dataset!r}{cfg} at revision {ds.revision!r}"


def fetch_inputs(ds: HubDataset) -> list[str]:
    """The files the fetch of DS reads on this machine: a local folder's data files (an edit of one makes the workflow
    fetch again), none for a hub id."""
    return [str(p) for p in local_files(ds.dataset)] if ds.local else []


def fetch_content(ds: HubDataset) -> str:
    """What decides whether the fetch of DS must run again, beside its declaration: a local folder's content hash
    (its file times do not: a folder restored with its older times, by ``cp -p``, ``tar`` or ``rsync -t``, is other
    content all the same), empty for a hub id (pinned by its revision)."""
    return local_content(ds.dataset)[0] if ds.local else ""


def _prefetch_hint(name: str, cache_dir: Path) -> str:
    return (
        f"pre-fetch it on a machine with network (`snakemake --until fetch_hub_task` with the same config, or "
        f"`snakemake resources/hub/{name}/{META_FILE}`), then copy {cache_dir / name} to this machine"
    )


def _offline_env() -> str | None:
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


def _read_meta(task_dir: Path) -> dict | None:
    p = task_dir / META_FILE
    if not p.is_file():
        return None
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TaskDataError(str(p), "file", f"cache metadata is not valid JSON: {e}") from e
    if not isinstance(meta, dict):
        raise TaskDataError(str(p), "file", "cache metadata must be a JSON object")
    return meta


def _cache_matches(task_dir: Path, ds: HubDataset, content: str | None) -> bool:
    """The cache holds DS (a local folder: at CONTENT, its content hash now)."""
    meta = _read_meta(task_dir)
    if meta is None:
        return False
    same = (meta.get("dataset"), meta.get("config"), meta.get("revision")) == (ds.dataset, ds.config, ds.revision)
    if ds.local and (meta.get("local") or {}).get("content_sha256") != content:
        return False
    return same and all((task_dir / f"{s}.jsonl").is_file() for s in ds.splits)


def _local_source(ds: HubDataset, task_dir: Path) -> dict:
    """A local folder's content (meta.json's ``local``: its content hash and each file's sha256)."""
    folder = Path(ds.dataset)
    if not folder.is_dir():
        raise TaskDataError(str(task_dir), "fetch", f"{_describe(ds)} does not exist (relative to {Path.cwd()})")
    content, files = local_content(folder)
    if not files:
        raise TaskDataError(str(task_dir), "fetch", f"{_describe(ds)} holds no data files")
    return {"content_sha256": content, "files": files}


def _settle_lock(lock: Lock | None, ds: HubDataset, commit: str | None, local: dict | None, where: str) -> None:
    """Refuse a commit (a local folder: a content hash) other than the pinned lock's, then record it (anyjev.lock)."""
    if lock is None:
        return
    extra = {"config": ds.config} if ds.config else {}
    if local is not None:
        lock.settle_content("datasets", ds.dataset, local["content_sha256"], where, **extra)
    else:
        lock.settle("datasets", ds.dataset, ds.revision, commit, where, **extra)


def fetch(name: str, cache_dir: str | os.PathLike, revision: str | None = None, *, dataset: HubDataset | None = None,
          force: bool = False, lock: Lock | None = None, source: str | os.PathLike | None = None) -> Path:
    """Download a hub task's splits once into ``<cache_dir>/<name>`` and return that folder.

    DATASET says what to download (a declaration's :meth:`~anyjev.data.declared.HubTaskDeclaration.hub_dataset`);
    without it, the published task NAME's, at REVISION when one is given. A matching cache (same dataset, config,
    revision, every split) is returned without touching the network. Without network (or without the ``datasets``
    package) and without a cache, raises TaskDataError naming the dataset id, the revision and how to pre-fetch. The
    revision is resolved to a commit first and that commit is downloaded; with LOCK, the commit is recorded there, and
    a pinned lock's other commit is refused (for a cache or a download alike). A local folder (DATASET's ``local``)
    is read without a revision and pinned by its content instead: the cache is reused while the folder's content hash
    is the one it recorded, and LOCK records (or, pinned, enforces) that hash. SOURCE: what ``datasets.load_dataset``
    reads instead of the hub id (a local folder holding the hub repo's files: a site mirror, or the tests), still
    recorded under the hub id.
    """
    ds = dataset if dataset is not None else declaration(name, revision).hub_dataset()
    cache_dir = Path(cache_dir)
    task_dir = cache_dir / name
    local = _local_source(ds, task_dir) if ds.local else None
    if local is not None and lock is not None:
        lock.check_content("datasets", ds.dataset, local["content_sha256"], f"the folder {ds.dataset}")
    if not force and _cache_matches(task_dir, ds, local and local["content_sha256"]):
        if local is not None:
            # The workflow reran this step because a file of the folder is newer than the cache, with the same content:
            # the cache is current, and says so by its time, or the next run would see it as out of date again.
            os.utime(task_dir / META_FILE)
        _settle_lock(lock, ds, (_read_meta(task_dir) or {}).get("resolved_sha"), local, f"the cache {task_dir}")
        return task_dir
    stale = _read_meta(task_dir) if task_dir.is_dir() else None
    note = f" (the cache holds revision {stale.get('revision')!r})" if stale else " (no cached copy)"
    try:
        import datasets
    except ImportError as e:
        raise TaskDataError(
            str(task_dir), "fetch", f"{_describe(ds)} is not cached{note} and the `datasets` package is not "
            f"installed; {_prefetch_hint(name, cache_dir)}"
        ) from e
    if local is not None:
        # A folder has no commit; its files are read anew (not from datasets' own cache of an earlier read).
        want, commit, options = None, None, {"download_mode": "force_redownload"}
    else:
        want = lock.revision_to_fetch("datasets", ds.dataset, ds.revision) if lock else ds.revision
        commit = resolve_commit("datasets", ds.dataset, want)
        if lock is not None:
            lock.check("datasets", ds.dataset, ds.revision, commit, f"the download of {ds.dataset}@{want}")
        options = {"revision": commit or want}
    tables = {}
    try:
        for split in ds.splits:
            tables[split] = datasets.load_dataset(str(source or ds.dataset), ds.config, split=split, **options)
    except Exception as e:  # noqa: BLE001 - any download failure gets the same actionable message
        if local is not None:
            raise TaskDataError(str(task_dir), "fetch", f"could not read {_describe(ds)} with datasets.load_dataset "
                                f"({type(e).__name__}: {e})") from e
        offline = _offline_env()
        why = f"{offline} is set" if offline else "no network, or the dataset/revision is not reachable"
        raise TaskDataError(
            str(task_dir), "fetch", f"could not download {_describe(ds)}{note}: {why} "
            f"({type(e).__name__}: {e}); {_prefetch_hint(name, cache_dir)}"
        ) from e
    if local is not None and _local_source(ds, task_dir) != local:
        raise TaskDataError(str(task_dir), "fetch", f"{_describe(ds)} changed while it was read: fetch it again")
    try:
        ds_version = importlib.metadata.version("datasets")
    except importlib.metadata.PackageNotFoundError:
        ds_version = None
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache_dir))
    try:
        meta: dict = {
            "task": name,
            "dataset": ds.dataset,
            "config": ds.config,
            "revision": ds.revision,
            "resolved_sha": commit,
            "datasets_version": ds_version,
            "splits": {},
            "label_names": {},
            **({"local": local} if local is not None else {}),
        }
        for split, table in tables.items():
            out = tmp / f"{split}.jsonl"
            rows = 0
            with open(out, "w", encoding="utf-8") as f:
                for row in table:
                    f.write(json.dumps(dict(row), ensure_ascii=False) + "\n")
                    rows += 1
            meta["splits"][split] = {"file": out.name, "rows": rows, "sha256": file_sha256(out)}
            for col, feat in (getattr(table, "features", None) or {}).items():
                names = getattr(feat, "names", None)
                if isinstance(names, list | tuple):
                    meta["label_names"][col] = list(names)
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if task_dir.exists():
            old = task_dir.with_name(f".{name}.old")
            if old.exists():
                shutil.rmtree(old)
            os.replace(task_dir, old)
            os.replace(tmp, task_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, task_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    _settle_lock(lock, ds, commit, local, f"the download into {task_dir}")
    return task_dir


@dataclass(frozen=True)
class FetchJob(Job):
    """What the fetch step of a hub task needs (built by ``Settings.fetch_job``): what to download (the declaration's
    dataset, config, revision and splits) and the run's lock file."""

    hub: HubDataset
    lock: Lock


def fetch_job(job: FetchJob, out: str | os.PathLike) -> Path:
    """The workflow's fetch step: the declared dataset at its revision into the cache folder OUT (the rule's
    ``<hub cache>/<name>``: a published task's name, or the name of the task that declares the dataset), the run's lock."""
    out = Path(out)
    return fetch(out.name, out.parent, dataset=job.hub, lock=job.lock)


# ---------------------------------------------------------------------------------------------------
# building from the cache


def _task_dir(name: str, splits: tuple[str, ...], cached_dir: Path) -> Path:
    """Accept either the task's own cache folder or the cache root that holds it."""
    if (cached_dir / META_FILE).is_file() or all((cached_dir / f"{s}.jsonl").is_file() for s in splits):
        return cached_dir
    return cached_dir / name


def build(task_name: str, cached_dir: str | os.PathLike, revision: str | None = None, *,
          declared: HubTaskDeclaration | None = None) -> Task:
    """Build a hub task from its cached hub rows (offline, standard library only).

    DECLARED: the task's declaration; without it, the published task TASK_NAME's. ``cached_dir`` is the folder
    :func:`fetch` returned or the cache root holding it (``<root>/<task_name>``). When ``revision`` is given, a cache
    fetched at another revision is refused.
    """
    d = declared if declared is not None else declaration(task_name)
    ds = d.hub_dataset()
    task_dir = _task_dir(task_name, ds.splits, Path(cached_dir))
    missing = [s for s in ds.splits if not (task_dir / f"{s}.jsonl").is_file()]
    if missing:
        want = d.at_revision(revision).hub_dataset()
        raise TaskDataError(
            str(task_dir), "cache", f"no cached split(s) {missing} of {_describe(want)}; {_prefetch_hint(task_name, Path(cached_dir))}"
        )
    meta = _read_meta(task_dir) or {}
    if meta and (meta.get("dataset"), meta.get("config")) != (ds.dataset, ds.config):
        raise TaskDataError(
            str(task_dir / META_FILE), "dataset", f"cache holds {meta.get('dataset')!r}/{meta.get('config')!r}, "
            f"expected {ds.dataset!r}/{ds.config!r}"
        )
    if revision and meta.get("revision") != revision:
        raise TaskDataError(
            str(task_dir / META_FILE), "revision", f"cache holds revision {meta.get('revision')!r}, expected {revision!r}"
        )
    files = {}
    for s in ds.splits:
        path = task_dir / f"{s}.jsonl"
        sha = file_sha256(path)
        recorded = (meta.get("splits") or {}).get(s, {}).get("sha256")
        if recorded and recorded != sha:
            raise TaskDataError(str(path), "file", f"sha256 {sha} differs from the {recorded} recorded at fetch time")
        files[s] = {"path": str(path), "sha256": sha}
    splits = {s: CachedSplit(s, task_dir / f"{s}.jsonl") for s in ds.splits}
    dropped = None
    if d.options_field:
        items, dropped = row_items(d, task_name, splits)
    else:
        names = (meta.get("label_names") or {}).get(d.label_field)
        items = build_items(d, task_name, splits, names, task_dir / META_FILE)
    source = {
        "dataset": ds.dataset,
        "config": ds.config,
        "revision": meta.get("revision"),
        "resolved_sha": meta.get("resolved_sha"),
        "datasets_version": meta.get("datasets_version"),
        "files": files,
    }
    if "local" in meta:  # a local folder: the content it was read at
        source["local"] = meta["local"]
    if d.invalid_options == "drop":
        source["dropped"] = dropped
    if not items:
        raise TaskDataError(str(task_dir), "cache", f"task {task_name!r} has no items after filtering")
    return Task(name=task_name, items=items, prior_group=d.prior_group, source=source)
