"""The published AnyJev tasks, from Hugging Face hub datasets: fetched once, then built offline.

Two steps, so that scoring never needs the network:

1. :func:`fetch` (its own workflow rule, on a machine with network) downloads the dataset splits a
   task needs with ``datasets.load_dataset(dataset, config, split=..., revision=...)`` and writes them
   unchanged (same columns, same label encodings) to a local cache::

       <cache_dir>/<task>/meta.json       dataset id, config, requested revision, resolved commit sha,
                                           datasets version, per split: file, rows, sha256;
                                           label_names: the names of every ClassLabel column
       <cache_dir>/<task>/<split>.jsonl   one JSON object per hub row, in hub order

   A cache whose meta.json has the same dataset, config and revision is reused without network.
   To use the tasks offline: ``snakemake --until fetch_hub_task`` on a machine
   with network, then copy ``resources/hub/<name>`` over.
2. :func:`build` turns the cached files into a :class:`~anyjev.data.tasks.Task` with the standard library only.

Revisions: each spec carries the revision to download. The values below are placeholders (``"main"``)
that could not be verified offline — TO VERIFY: replace them with the commit sha that ``meta.json``
records as ``resolved_sha`` after the first fetch. A revision can also be given per call
(``fetch(..., revision=...)``, ``build(..., revision=...)`` checks the cache against it).

Tasks (item ids are ``<hub split>-<row index in that split>``; no item carries a split, the seeded
:func:`anyjev.data.split.split_items` assigns test / calibration):

* ``banking20`` (mteb/banking77; columns text, label int, label_text): the 20 intents most frequent in
  the train split (ties broken by lower label id); the items are the test rows with those intents;
  options = the 20 label texts in label-id order with ``_`` replaced by a space.
* ``newsgroups`` (SetFit/20_newsgroups test; text, label int, label_text): text stripped, rows under 40
  characters dropped, the rest cut to the first 2,000 characters; options = :data:`NEWSGROUPS_TOPICS`
  readable names in label-id order.
* ``injection`` (deepset/prompt-injections train then test; text, label 0/1): noul, label 1 → Yes.
* ``massive_route`` (mteb/amazon_massive_scenario, config en, test; text, label = scenario string,
  label_text): choice among the 18 specialist agents of :data:`MASSIVE_AGENTS`, in alphabetical scenario
  order. The scenario is read from ``label`` when it is a string, else from ``label_text``.
* ``clinc_escalate`` (clinc_oos, config plus, test; text, intent ClassLabel int with ``oos`` = 42): noul,
  in-scope → Yes. The out-of-scope id is looked up in the cached ClassLabel names (42 if none recorded).

All five use prior_group = "question" (one question per task).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from anyjev.data.taskfile import jsonl_rows
from anyjev.data.tasks import Item, Task
from anyjev.decision.questions import choice, noul
from anyjev.errors import TaskDataError
from anyjev.files import file_sha256
from anyjev.jobs import Job
from anyjev.lock import Lock, resolve_commit

# TO VERIFY: placeholder revision, not checked offline. Pin each spec to the commit sha recorded as
# `resolved_sha` in <cache>/<task>/meta.json after the first fetch on a machine with network.
REVISION_TO_VERIFY = "main"
# Commit shas other public code pins for these datasets (MTEB's Banking77Classification task metadata;
# a prompt-injection project's load_dataset call). Not fetched from here: confirm with resolved_sha.
BANKING77_REVISION = "0fd18e25b25c072e09e0d92ab615fda904d66300"
PROMPT_INJECTIONS_REVISION = "4f61ecb038e9c3fb77e21034b22511b523772cdd"

BANKING_QUESTION = "What is the customer's intent?"
NEWSGROUPS_QUESTION = "Which newsgroup topic is this post about?"
INJECTION_QUESTION = "Is this user message a prompt injection attempt?"
MASSIVE_QUESTION = "Which specialist agent should handle this request?"
CLINC_QUESTION = "Is this request within the scope of what the assistant supports?"

BANKING_TOP = 20
NEWSGROUPS_MIN_CHARS = 40
NEWSGROUPS_MAX_CHARS = 2000
CLINC_OOS_NAME = "oos"
CLINC_OOS_ID = 42

# The 20 newsgroups in SetFit/20_newsgroups label-id order, with readable names shown as options.
NEWSGROUPS_TOPICS: dict[str, str] = {
    "alt.atheism": "Atheism",
    "comp.graphics": "Computer graphics",
    "comp.os.ms-windows.misc": "Microsoft Windows",
    "comp.sys.ibm.pc.hardware": "IBM PC hardware",
    "comp.sys.mac.hardware": "Mac hardware",
    "comp.windows.x": "X Window System",
    "misc.forsale": "Items for sale",
    "rec.autos": "Cars",
    "rec.motorcycles": "Motorcycles",
    "rec.sport.baseball": "Baseball",
    "rec.sport.hockey": "Hockey",
    "sci.crypt": "Cryptography",
    "sci.electronics": "Electronics",
    "sci.med": "Medicine",
    "sci.space": "Space",
    "soc.religion.christian": "Christianity",
    "talk.politics.guns": "Gun politics",
    "talk.politics.mideast": "Middle East politics",
    "talk.politics.misc": "Politics (other)",
    "talk.religion.misc": "Religion (other)",
}

# The 18 MASSIVE scenarios (alphabetical = option order) and the specialist agent each routes to.
MASSIVE_AGENTS: dict[str, str] = {
    "alarm": "Alarm agent",
    "audio": "Device volume agent",
    "calendar": "Calendar agent",
    "cooking": "Cooking and recipes agent",
    "datetime": "Date and time agent",
    "email": "Email agent",
    "general": "General chat agent",
    "iot": "Smart home agent",
    "lists": "Lists and reminders agent",
    "music": "Music preferences agent",
    "news": "News agent",
    "play": "Media playback agent",
    "qa": "General knowledge agent",
    "recommendation": "Recommendations agent",
    "social": "Social media agent",
    "takeaway": "Food delivery agent",
    "transport": "Transport and travel agent",
    "weather": "Weather agent",
}


@dataclass(frozen=True)
class HubTaskSpec:
    """Where a published task's data lives on the hub and which splits it needs."""

    name: str
    dataset: str
    config: str | None
    revision: str
    splits: tuple[str, ...]
    # The question every item has, known before the data is fetched (what `anyjev plan` estimates from).
    kind: str
    k: int


HUB_TASKS: dict[str, HubTaskSpec] = {
    "banking20": HubTaskSpec("banking20", "mteb/banking77", None, BANKING77_REVISION, ("train", "test"), "choice", BANKING_TOP),
    "newsgroups": HubTaskSpec("newsgroups", "SetFit/20_newsgroups", None, REVISION_TO_VERIFY, ("test",), "choice",
                              len(NEWSGROUPS_TOPICS)),
    "injection": HubTaskSpec("injection", "deepset/prompt-injections", None, PROMPT_INJECTIONS_REVISION, ("train", "test"),
                             "noul", 2),
    "massive_route": HubTaskSpec("massive_route", "mteb/amazon_massive_scenario", "en", REVISION_TO_VERIFY, ("test",), "choice",
                                 len(MASSIVE_AGENTS)),
    "clinc_escalate": HubTaskSpec("clinc_escalate", "clinc_oos", "plus", REVISION_TO_VERIFY, ("test",), "noul", 2),
}


def spec_for(task_name: str, revision: str | None = None) -> HubTaskSpec:
    """The spec of a published task, with the revision overridden when one is given."""
    if task_name not in HUB_TASKS:
        raise TaskDataError(f"<hub task {task_name}>", "name", f"unknown hub task; known: {sorted(HUB_TASKS)}")
    spec = HUB_TASKS[task_name]
    return dataclasses.replace(spec, revision=revision) if revision else spec


def _describe(spec: HubTaskSpec) -> str:
    cfg = f", config {spec.config!r}" if spec.config else ""
    return f"hub dataset {spec.dataset!r}{cfg} at revision {spec.revision!r}"


def _prefetch_hint(spec: HubTaskSpec, cache_dir: Path) -> str:
    return (
        f"pre-fetch it on a machine with network (`snakemake --until fetch_hub_task` with the same config, or "
        f"`snakemake resources/hub/{spec.name}/meta.json`), then copy {cache_dir / spec.name} to this machine"
    )


def _offline_env() -> str | None:
    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return var
    return None


def _read_meta(task_dir: Path) -> dict | None:
    p = task_dir / "meta.json"
    if not p.is_file():
        return None
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TaskDataError(str(p), "file", f"cache metadata is not valid JSON: {e}") from e
    if not isinstance(meta, dict):
        raise TaskDataError(str(p), "file", "cache metadata must be a JSON object")
    return meta


def _cache_matches(task_dir: Path, spec: HubTaskSpec) -> bool:
    meta = _read_meta(task_dir)
    if meta is None:
        return False
    same = (meta.get("dataset"), meta.get("config"), meta.get("revision")) == (spec.dataset, spec.config, spec.revision)
    return same and all((task_dir / f"{s}.jsonl").is_file() for s in spec.splits)


def _settle_lock(lock: Lock | None, spec: HubTaskSpec, commit: str | None, where: str) -> None:
    """Refuse a commit other than the pinned lock's, then record it (anyjev.lock)."""
    if lock is not None:
        lock.settle("datasets", spec.dataset, spec.revision, commit, where, **({"config": spec.config} if spec.config else {}))


def fetch(task_name: str, cache_dir: str | os.PathLike, revision: str | None = None, *, force: bool = False,
          lock: Lock | None = None, source: str | os.PathLike | None = None) -> Path:
    """Download a published task's splits once into ``<cache_dir>/<task_name>`` and return that folder.

    A matching cache (same dataset, config, revision) is returned without touching the network. Without
    network (or without the ``datasets`` package) and without a cache, raises TaskDataError naming the
    dataset id, the revision and how to pre-fetch. The revision is resolved to a commit first and that commit is
    downloaded; with LOCK, the commit is recorded there, and a pinned lock's other commit is refused (for a cache
    or a download alike). SOURCE: what ``datasets.load_dataset`` reads instead of the hub id (a local folder
    holding the hub repo's files: a site mirror, or the tests), still recorded under the hub id.
    """
    spec = spec_for(task_name, revision)
    cache_dir = Path(cache_dir)
    task_dir = cache_dir / spec.name
    if not force and _cache_matches(task_dir, spec):
        _settle_lock(lock, spec, (_read_meta(task_dir) or {}).get("resolved_sha"), f"the cache {task_dir}")
        return task_dir
    stale = _read_meta(task_dir) if task_dir.is_dir() else None
    note = f" (the cache holds revision {stale.get('revision')!r})" if stale else " (no cached copy)"
    try:
        import datasets
    except ImportError as e:
        raise TaskDataError(
            str(task_dir), "fetch", f"{_describe(spec)} is not cached{note} and the `datasets` package is not "
            f"installed; {_prefetch_hint(spec, cache_dir)}"
        ) from e
    want = lock.revision_to_fetch("datasets", spec.dataset, spec.revision) if lock else spec.revision
    commit = resolve_commit("datasets", spec.dataset, want)
    if lock is not None:
        lock.check("datasets", spec.dataset, spec.revision, commit, f"the download of {spec.dataset}@{want}")
    tables = {}
    try:
        for split in spec.splits:
            tables[split] = datasets.load_dataset(str(source or spec.dataset), spec.config, split=split, revision=commit or want)
    except Exception as e:  # noqa: BLE001 - any download failure gets the same actionable message
        offline = _offline_env()
        why = f"{offline} is set" if offline else "no network, or the dataset/revision is not reachable"
        raise TaskDataError(
            str(task_dir), "fetch", f"could not download {_describe(spec)}{note}: {why} "
            f"({type(e).__name__}: {e}); {_prefetch_hint(spec, cache_dir)}"
        ) from e
    try:
        ds_version = importlib.metadata.version("datasets")
    except importlib.metadata.PackageNotFoundError:
        ds_version = None
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=cache_dir))
    try:
        meta: dict = {
            "task": spec.name,
            "dataset": spec.dataset,
            "config": spec.config,
            "revision": spec.revision,
            "resolved_sha": commit,
            "datasets_version": ds_version,
            "splits": {},
            "label_names": {},
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
        (tmp / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if task_dir.exists():
            old = task_dir.with_name(f".{spec.name}.old")
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
    _settle_lock(lock, spec, commit, f"the download into {task_dir}")
    return task_dir


@dataclass(frozen=True)
class FetchJob(Job):
    """What the fetch step of a hub dataset needs (built by ``Settings.fetch_job``): the revision its tasks ask for,
    the cache folder, and the run's lock file."""

    dataset: str
    revision: str | None
    cache: str
    lock: Lock


def fetch_job(job: FetchJob) -> Path:
    """The workflow's fetch step: the configured revision, the run's lock."""
    return fetch(job.dataset, job.cache, revision=job.revision, lock=job.lock)


# ---------------------------------------------------------------------------------------------------
# building from the cache


def _task_dir(task_name: str, cached_dir: Path) -> Path:
    """Accept either the task's own cache folder or the cache root that holds it."""
    spec = HUB_TASKS[task_name]
    if (cached_dir / "meta.json").is_file() or all((cached_dir / f"{s}.jsonl").is_file() for s in spec.splits):
        return cached_dir
    return cached_dir / task_name


def _field(row: dict, col: str, types: type | tuple[type, ...], path: Path, line: int):
    if col not in row:
        raise TaskDataError(str(path), f"line {line}", f"missing column {col!r} (has {sorted(row)})")
    val = row[col]
    if isinstance(val, bool) or not isinstance(val, types):
        raise TaskDataError(str(path), f"line {line}", f"column {col!r} = {val!r} has an unexpected type")
    return val


class _Split:
    """One cached split: its path and rows (line number, row)."""

    def __init__(self, name: str, path: Path) -> None:
        self.name = name
        self.path = path
        self.rows = jsonl_rows(path)

    def with_ids(self):
        """(item id, line, row) in hub order; the id is ``<split>-<row index>``."""
        for i, (line, row) in enumerate(self.rows):
            yield f"{self.name}-{i}", line, row


def _build_banking20(splits: dict[str, _Split], meta: dict) -> list[Item]:
    train, test = splits["train"], splits["test"]
    names: dict[int, str] = {}
    counts: Counter[int] = Counter()
    for sp in (train, test):
        for _, line, row in sp.with_ids():
            label = _field(row, "label", int, sp.path, line)
            text = _field(row, "label_text", str, sp.path, line)
            if names.setdefault(label, text) != text:
                raise TaskDataError(
                    str(sp.path), f"line {line}", f"label {label} is {text!r} here but {names[label]!r} elsewhere"
                )
            if sp is train:
                counts[label] += 1
    if len(counts) < BANKING_TOP:
        raise TaskDataError(str(train.path), "file", f"only {len(counts)} intents in train, need {BANKING_TOP}")
    top = sorted(sorted(counts, key=lambda lab: (-counts[lab], lab))[:BANKING_TOP])
    q = choice(BANKING_QUESTION, [names[lab].replace("_", " ") for lab in top])
    index = {lab: j for j, lab in enumerate(top)}
    items = []
    for item_id, line, row in test.with_ids():
        label = row["label"]
        if label in index:
            items.append(Item(id=item_id, state=_field(row, "text", str, test.path, line), question=q, gold=index[label]))
    return items


def _build_newsgroups(splits: dict[str, _Split], meta: dict) -> list[Item]:
    test = splits["test"]
    groups = list(NEWSGROUPS_TOPICS)
    q = choice(NEWSGROUPS_QUESTION, list(NEWSGROUPS_TOPICS.values()))
    items = []
    for item_id, line, row in test.with_ids():
        label = _field(row, "label", int, test.path, line)
        if not 0 <= label < len(groups):
            raise TaskDataError(str(test.path), f"line {line}", f"label {label} is not a 20-newsgroups id 0..19")
        if "label_text" in row and row["label_text"] != groups[label]:
            raise TaskDataError(
                str(test.path), f"line {line}", f"label {label} is {row['label_text']!r}, expected {groups[label]!r}"
            )
        text = _field(row, "text", str, test.path, line).strip()
        if len(text) < NEWSGROUPS_MIN_CHARS:
            continue
        items.append(Item(id=item_id, state=text[:NEWSGROUPS_MAX_CHARS], question=q, gold=label))
    return items


def _build_injection(splits: dict[str, _Split], meta: dict) -> list[Item]:
    q = noul(INJECTION_QUESTION)
    items = []
    for split in ("train", "test"):
        sp = splits[split]
        for item_id, line, row in sp.with_ids():
            label = _field(row, "label", int, sp.path, line)
            if label not in (0, 1):
                raise TaskDataError(str(sp.path), f"line {line}", f"label {label} is not 0 or 1")
            text = _field(row, "text", str, sp.path, line)
            items.append(Item(id=item_id, state=text, question=q, gold=0 if label == 1 else 1))
    return items


def _build_massive_route(splits: dict[str, _Split], meta: dict) -> list[Item]:
    test = splits["test"]
    scenarios = sorted(MASSIVE_AGENTS)
    q = choice(MASSIVE_QUESTION, [MASSIVE_AGENTS[s] for s in scenarios])
    index = {s: j for j, s in enumerate(scenarios)}
    items = []
    for item_id, line, row in test.with_ids():
        scenario = row.get("label") if isinstance(row.get("label"), str) else row.get("label_text")
        if scenario not in index:
            raise TaskDataError(
                str(test.path), f"line {line}", f"scenario {scenario!r} (columns label/label_text) is not one of {scenarios}"
            )
        if isinstance(row.get("lang"), str) and not row["lang"].startswith("en"):
            raise TaskDataError(str(test.path), f"line {line}", f"lang {row['lang']!r} is not English")
        items.append(Item(id=item_id, state=_field(row, "text", str, test.path, line), question=q, gold=index[scenario]))
    return items


def _build_clinc_escalate(splits: dict[str, _Split], meta: dict) -> list[Item]:
    test = splits["test"]
    names = (meta.get("label_names") or {}).get("intent")
    oos_id = names.index(CLINC_OOS_NAME) if names and CLINC_OOS_NAME in names else CLINC_OOS_ID
    q = noul(CLINC_QUESTION)
    items = []
    for item_id, line, row in test.with_ids():
        intent = _field(row, "intent", (int, str), test.path, line)
        out_of_scope = intent == CLINC_OOS_NAME if isinstance(intent, str) else intent == oos_id
        items.append(Item(id=item_id, state=_field(row, "text", str, test.path, line), question=q, gold=1 if out_of_scope else 0))
    return items


_BUILDERS: dict[str, Callable[[dict[str, _Split], dict], list[Item]]] = {
    "banking20": _build_banking20,
    "newsgroups": _build_newsgroups,
    "injection": _build_injection,
    "massive_route": _build_massive_route,
    "clinc_escalate": _build_clinc_escalate,
}


def build(task_name: str, cached_dir: str | os.PathLike, revision: str | None = None) -> Task:
    """Build a published task from its cached hub rows (offline, standard library only).

    ``cached_dir`` is the folder :func:`fetch` returned or the cache root holding it. When ``revision`` is
    given, a cache fetched at another revision is refused.
    """
    spec = spec_for(task_name)
    task_dir = _task_dir(task_name, Path(cached_dir))
    missing = [s for s in spec.splits if not (task_dir / f"{s}.jsonl").is_file()]
    if missing:
        want = dataclasses.replace(spec, revision=revision) if revision else spec
        raise TaskDataError(
            str(task_dir), "cache", f"no cached split(s) {missing} of {_describe(want)}; {_prefetch_hint(want, Path(cached_dir))}"
        )
    meta = _read_meta(task_dir) or {}
    if meta and (meta.get("dataset"), meta.get("config")) != (spec.dataset, spec.config):
        raise TaskDataError(
            str(task_dir / "meta.json"), "dataset", f"cache holds {meta.get('dataset')!r}/{meta.get('config')!r}, "
            f"expected {spec.dataset!r}/{spec.config!r}"
        )
    if revision and meta.get("revision") != revision:
        raise TaskDataError(
            str(task_dir / "meta.json"), "revision", f"cache holds revision {meta.get('revision')!r}, expected {revision!r}"
        )
    files = {}
    for s in spec.splits:
        path = task_dir / f"{s}.jsonl"
        sha = file_sha256(path)
        recorded = (meta.get("splits") or {}).get(s, {}).get("sha256")
        if recorded and recorded != sha:
            raise TaskDataError(str(path), "file", f"sha256 {sha} differs from the {recorded} recorded at fetch time")
        files[s] = {"path": str(path), "sha256": sha}
    splits = {s: _Split(s, task_dir / f"{s}.jsonl") for s in spec.splits}
    items = _BUILDERS[task_name](splits, meta)
    source = {
        "dataset": spec.dataset,
        "config": spec.config,
        "revision": meta.get("revision"),
        "resolved_sha": meta.get("resolved_sha"),
        "datasets_version": meta.get("datasets_version"),
        "files": files,
    }
    if not items:
        raise TaskDataError(str(task_dir), "cache", f"task {task_name!r} has no items after filtering")
    return Task(name=task_name, items=items, prior_group="question", source=source)
