"""The lock file: the commit every hub dataset and hub model of a run resolved to (a local folder: its content hash).

A branch name such as ``main`` moves; a commit does not. Fetching a hub dataset and preparing a hub model record
the commit they got (keyed by hub id, with the revision the config asked for) in a YAML lock file:

* unpinned run (config ``lock: null``): the record goes to ``resources/lock.yaml`` (machine state, like the
  caches). Copy it next to the config (``config/<name>.lock.yaml``), commit it, and set ``lock:`` to it.
* pinned run (``lock: <path>``): every dataset and model the lock names is downloaded at the locked commit, and a
  cache or a download at any other commit is refused, naming the hub id, the locked and the found commit. Hub ids
  the lock does not name yet are resolved and added to it, so the committed file stays complete.

A dataset in a local folder has no commit: its entry, under the folder as the config names it, holds the content
hash of its files instead (``content_sha256``, :mod:`anyjev.data.local`), and a pinned run refuses the folder once
its content differs.

Standard library and PyYAML only; the network is touched only by :func:`resolve_commit` (a full commit hash
needs none).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from anyjev.errors import ConfigError
from anyjev.files import flock, now_iso, write_text_atomic

log = logging.getLogger(__name__)

KINDS = ("datasets", "models")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
HEADER = (
    "# anyjev lock file: the commit each hub dataset and model resolved to, and the content hash of each local dataset\n"
    "# folder (written by fetch and prepare-model). Commit it next to your config and set `lock: <this file>` there to\n"
    "# pin every later run to them.\n"
)


def is_commit(revision: str | None) -> bool:
    """A full commit hash (which pins by itself)."""
    return bool(revision and COMMIT.match(revision))


def resolve_commit(kind: str, repo: str, revision: str | None) -> str | None:
    """The commit REVISION of a hub dataset or model points to now (None when the hub cannot be asked)."""
    if is_commit(revision):
        return revision
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        info = api.dataset_info(repo, revision=revision) if kind == "datasets" else api.model_info(repo, revision=revision)
        return info.sha
    except Exception as exc:  # noqa: BLE001 - offline or unreachable: the caller decides what that means
        log.warning("could not resolve %s %s@%s to a commit (%s: %s)", kind[:-1], repo, revision, type(exc).__name__, exc)
        return None


@dataclass(frozen=True)
class Lock:
    """Where a run records resolved commits, and whether it is pinned to them (``pinned``: the config's ``lock``)."""

    path: str
    pinned: bool

    def read(self) -> dict[str, dict[str, dict[str, Any]]]:
        p = Path(self.path)
        if not p.is_file():
            if self.pinned:
                raise ConfigError("lock", f"lock file {self.path!r} does not exist: write it with an unpinned run "
                                  "(lock: null records resources/lock.yaml), copy it there, or set lock: null")
            return {k: {} for k in KINDS}
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError("lock", f"lock file {self.path!r} is not valid YAML: {exc}") from None
        if not isinstance(data, dict) or set(data) - set(KINDS):
            raise ConfigError("lock", f"lock file {self.path!r} must be a mapping with keys {', '.join(KINDS)}")
        return {k: dict(data.get(k) or {}) for k in KINDS}

    def locked(self, kind: str, repo: str) -> dict[str, Any] | None:
        """The lock's entry for a hub id when this run is pinned (else None: nothing to enforce)."""
        return self.read()[kind].get(repo) if self.pinned else None

    def check(self, kind: str, repo: str, revision: str | None, found: str | None, where: str) -> None:
        """Refuse FOUND (the commit a cache holds or a download got, at WHERE) when the pinned lock names another."""
        entry = self.locked(kind, repo)
        if entry is None:
            return
        if entry.get("revision") != revision:
            raise ConfigError("lock", f"{kind[:-1]} {repo!r}: the config asks for revision {revision!r}, but {self.path} "
                              f"was made for revision {entry.get('revision')!r} (commit {entry.get('commit')}): update "
                              "the lock (delete its entry and fetch again) or restore the revision")
        if found != entry.get("commit"):
            raise ConfigError("lock", f"{kind[:-1]} {repo!r} is locked at commit {entry.get('commit')} in {self.path}, "
                              f"but {where} is at commit {found}: delete {where} to download the locked commit, or "
                              "update the lock if the new commit is intended")

    def settle(self, kind: str, repo: str, revision: str | None, commit: str | None, where: str, **extra: Any) -> None:
        """Refuse COMMIT (what WHERE holds) when the pinned lock names another, then record it."""
        self.check(kind, repo, revision, commit, where)
        self.record(kind, repo, revision, commit, **extra)

    def settle_content(self, kind: str, name: str, content_sha256: str, where: str, **extra: Any) -> None:
        """A local folder NAME (what WHERE holds, pinned by the content hash of its files): refuse another hash than a
        pinned lock's, then record it."""
        self.check_content(kind, name, content_sha256, where)
        self._write(kind, name, {"content_sha256": content_sha256, **extra})

    def check_content(self, kind: str, name: str, content_sha256: str, where: str) -> None:
        """Refuse CONTENT_SHA256 (the content hash of the local folder NAME, at WHERE) when the pinned lock names another."""
        entry = self.locked(kind, name)
        if entry is not None and entry.get("content_sha256") != content_sha256:
            raise ConfigError("lock", f"{kind[:-1]} {name!r} is locked at content sha256 {entry.get('content_sha256')} in "
                              f"{self.path}, but {where} holds content sha256 {content_sha256}: restore its files, or delete "
                              f"its entry from {self.path} if the change is intended")

    def revision_to_fetch(self, kind: str, repo: str, revision: str | None) -> str | None:
        """What to download: the locked commit in a pinned run (after checking the config's revision), else REVISION."""
        entry = self.locked(kind, repo)
        if entry is None:
            return revision
        self.check(kind, repo, revision, entry.get("commit"), "the lock")
        return entry["commit"]

    def record(self, kind: str, repo: str, revision: str | None, commit: str | None, **extra: Any) -> None:
        """Add or update a hub id's entry (pinned: only add; an existing entry was checked and is kept)."""
        if commit is None:
            log.warning("%s %s@%s: no commit known, not recorded in %s", kind[:-1], repo, revision, self.path)
            return
        if self._write(kind, repo, {"revision": revision, "commit": commit, **extra}):
            log.info("%s %s@%s -> commit %s recorded in %s", kind[:-1], repo, revision, commit, self.path)

    def _write(self, kind: str, name: str, entry: dict[str, Any]) -> bool:
        """Add or update NAME's entry (pinned: only add; an existing entry was checked and is kept); whether written."""
        folder = Path(self.path).parent
        folder.mkdir(parents=True, exist_ok=True)
        with flock(folder):  # one writer at a time (fetch and prepare-model jobs run in parallel)
            data = self.read() if Path(self.path).is_file() else {k: {} for k in KINDS}
            if self.pinned and name in data[kind]:
                return False
            data[kind][name] = {**entry, "recorded": now_iso()}
            body = yaml.safe_dump({k: dict(sorted(v.items())) for k, v in data.items()}, sort_keys=False)
            write_text_atomic(self.path, HEADER + body)
        return True
