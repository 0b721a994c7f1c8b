"""Per-item score files that outlive the server.

A cell's scores are a JSON-lines file: a header line with the cell's identity (what was read: model,
task file, prompt version, layouts), then one line per item with its gold label, prior group, label
strings and ids, and for every layout its order, prompt hash and label log-probabilities. A cell may
also hold records of other types after its items (``certificate``: adaptive scoring's stopping threshold;
``content_free``: the content-free probes), each with a unique ``id``; :func:`read_scores` returns the items
only, :func:`read_cell` the others too.

While scoring, items are appended to ``<out>.partial`` and flushed as they complete, so a killed job
loses at most the chunk in flight. The final file is written atomically in task order, so a resumed
cell produces the same bytes as an uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from anyjev.errors import TaskDataError
from anyjev.files import write_text_atomic

log = logging.getLogger(__name__)

FORMAT = "anyjev.scores/1"


def partial_path(out: str | os.PathLike) -> Path:
    return Path(str(out) + ".partial")


def _dumps(obj: dict) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _lines(text: str) -> list[str]:
    """Lines split on "\n" only: str.splitlines() also splits on U+2028, U+0085 and other characters that
    json.dumps(ensure_ascii=False) writes unescaped (e.g. inside an item id)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


class PartialScores:
    """Append-only checkpoint of a cell being scored; resumes only under the same identity."""

    def __init__(self, out: str | os.PathLike, identity: dict) -> None:
        self.path = partial_path(out)
        self.identity = identity
        self.records: dict[str, dict] = {}
        self.extras: dict[str, dict] = {}  # records of other types (certificate, content_free), by id
        self._load()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        self._fh = open(self.path, "a", encoding="utf-8")
        if new:
            self._write({"type": "header", "format": FORMAT, "identity": identity})

    def _load(self) -> None:
        if not self.path.exists():
            return
        text = self.path.read_text(encoding="utf-8")
        lines = _lines(text)
        # Every line is written with its "\n": a last line without one was cut by a kill mid-write.
        torn_tail = bool(text) and not text.endswith("\n")
        try:
            header = json.loads(lines[0]) if lines and not (torn_tail and len(lines) == 1) else None
        except json.JSONDecodeError:
            header = None  # a torn header: there is nothing to resume
        if not isinstance(header, dict) or header.get("identity") != self.identity:
            stale = self.path.with_name(self.path.name + f".stale-{int(time.time())}")
            os.replace(self.path, stale)
            why = "were made under another identity" if isinstance(header, dict) else "have no readable header"
            log.warning("partial scores %s %s; moved aside to %s", self.path, why, stale)
            return
        for n, line in enumerate(lines[1:], start=2):
            try:
                if torn_tail and n == len(lines):
                    raise json.JSONDecodeError("no trailing newline", line, len(line))
                rec = json.loads(line)
            except json.JSONDecodeError:
                # Only the last line can be torn by a kill mid-write; anything else is corruption.
                if n == len(lines):
                    log.warning("%s:%d: dropping a torn last line (the process was killed mid-write)", self.path, n)
                    self._truncate_to(lines[: n - 1])
                    break
                raise TaskDataError(str(self.path), f"line {n}", "corrupt partial scores line") from None
            self._keep(rec)
        log.info("resuming %s: %d items already scored", self.path, len(self.records))

    def _truncate_to(self, lines: list[str]) -> None:
        write_text_atomic(self.path, "".join(line + "\n" for line in lines))

    def _write(self, obj: dict) -> None:
        self._fh.write(_dumps(obj) + "\n")

    def _keep(self, rec: dict) -> None:
        (self.records if is_item(rec) else self.extras)[rec["id"]] = rec

    def add(self, records: Iterable[dict]) -> None:
        for rec in records:
            self._write(rec)
            self._keep(rec)
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def finalise(self, out: str | os.PathLike, order: list[str]) -> None:
        """Write the final file in task order (atomically) and remove the checkpoint."""
        self.close()
        missing = [i for i in order if i not in self.records]
        if missing:
            raise RuntimeError(f"cannot finalise {out}: {len(missing)} items unscored (first: {missing[:3]})")
        extras = [self.extras[i] for i in sorted(self.extras)]
        write_scores(out, self.identity, [self.records[i] for i in order] + extras)
        self.path.unlink()


def is_item(rec: dict) -> bool:
    """Item records carry ``type: item`` (older files none); other record types are cell-level extras."""
    return rec.get("type", "item") == "item"


def write_scores(out: str | os.PathLike, identity: dict, records: list[dict]) -> None:
    lines = [_dumps({"type": "header", "format": FORMAT, "identity": identity}), *map(_dumps, records)]
    write_text_atomic(out, "".join(line + "\n" for line in lines))


def scored_under(path: str | os.PathLike, identity: dict) -> bool:
    """Whether PATH is a final scores file made under IDENTITY (reads its header line only)."""
    try:
        with open(path, encoding="utf-8") as fh:
            header = json.loads(fh.readline())
    except (OSError, json.JSONDecodeError):
        return False
    return header.get("format") == FORMAT and header.get("identity") == identity


def read_scores(path: str | os.PathLike) -> tuple[dict, list[dict]]:
    """(identity, item records) of a final scores file."""
    identity, items, _ = read_cell(path)
    return identity, items


def read_cell(path: str | os.PathLike) -> tuple[dict, list[dict], dict[str, dict]]:
    """(identity, item records, other records by id) of a final scores file."""
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        lines = _lines(fh.read())
    if not lines:
        raise TaskDataError(str(path), "line 1", "empty scores file")
    header = json.loads(lines[0])
    if header.get("format") != FORMAT:
        raise TaskDataError(str(path), "line 1", f"not an {FORMAT} file (header {header!r:.200})")
    records = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TaskDataError(str(path), f"line {n}", f"not JSON ({exc})") from None
    return header["identity"], [r for r in records if is_item(r)], {r["id"]: r for r in records if not is_item(r)}
