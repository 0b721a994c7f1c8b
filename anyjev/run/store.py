"""Per-item score files that outlive the server: a cell's scores written (its format, and its one reader, are
:mod:`anyjev.rundata.scores`).

While scoring, items are appended to ``<out>.partial`` and flushed as they complete, so a killed job
loses at most the chunks in flight (the chunk being read, and the one read before it while the server check for it
is out: :func:`anyjev.run.full.score_full`). The final file is written atomically in task order, so a resumed
cell produces the same bytes as an uninterrupted one (but for the time the batch audit records it took).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from anyjev.errors import ServerChangedError, TaskDataError
from anyjev.files import write_text_atomic
from anyjev.rundata.scores import FORMAT, is_item, split_lines

if TYPE_CHECKING:  # imported where a server is bound: reading a scores file (evaluate, inspect) needs no HTTP client
    from anyjev.run.server_check import ServerIdentity

log = logging.getLogger(__name__)


def partial_path(out: str | os.PathLike) -> Path:
    return Path(str(out) + ".partial")


def _dumps(obj: dict) -> str:
    """A record's line: ``json.dumps(sort_keys=True, ensure_ascii=False, separators=(",", ":"))``, written by orjson
    (about 5x faster on a K = 20 item) wherever orjson writes the same text (:func:`_written_alike`)."""
    if _written_alike(obj):
        try:
            return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS).decode()
        except orjson.JSONEncodeError:  # an int beyond 64 bits, a lone surrogate: json writes them
            pass
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _plain(x: float) -> bool:
    """Whether both codecs write the float X alike: both write a double's shortest round-trip digits, but Python
    switches to exponent notation below 1e-4 and from 1e16 (orjson below 1e-7, and with another exponent format),
    and writes NaN and Infinity (orjson null)."""
    return x == 0.0 or 1e-4 <= abs(x) < 1e16


def _written_alike(obj: object) -> bool:
    """Whether orjson writes OBJ as :func:`_dumps`' json call does: every float :func:`_plain`, every string and key
    printable (the two escape the same characters, ``"`` and ``\\`` among printable ones, alike), nothing but dicts
    with string keys, lists, tuples, strings, ints, floats, bools and None. A record's values are checked in the loop
    over their container (a call each would cost as much as json's own encoding)."""
    t = type(obj)
    if t is dict:
        for key, value in obj.items():
            if type(key) is not str or not key.isprintable():
                return False
            tv = type(value)
            if tv is float:
                if not (value == 0.0 or 1e-4 <= abs(value) < 1e16):  # _plain, inline
                    return False
            elif tv is str:
                if not value.isprintable():
                    return False
            elif not (tv is int or tv is bool or value is None or _written_alike(value)):
                return False
        return True
    if t is list or t is tuple:
        for value in obj:
            tv = type(value)
            if tv is float:
                if not (value == 0.0 or 1e-4 <= abs(value) < 1e16):
                    return False
            elif not (tv is int or tv is bool or _written_alike(value)):
                return False
        return True
    if t is float:
        return _plain(obj)
    if t is str:
        return obj.isprintable()
    return t is int or t is bool or obj is None


class PartialScores:
    """Append-only checkpoint of a cell being scored; resumes only under the same identity, and from the same server.

    The server the items were scored on is recorded in the checkpoint's header (:meth:`bind_server`): a resume under
    another server is refused, and each chunk is written only once the server has been checked again (``verify``)."""

    def __init__(self, out: str | os.PathLike, identity: dict) -> None:
        self.path = partial_path(out)
        self.identity = identity
        self.records: dict[str, dict] = {}
        self.extras: dict[str, dict] = {}  # records of other types (certificate, content_free), by id
        self._lines: dict[str, str] = {}  # each record's line (:func:`_dumps`), by id: the final file is made of them
        self.server: ServerIdentity | None = None  # the server the checkpointed items were scored on
        self._recorded_server: dict | None = None
        self._verify: Callable[[], None] | None = None
        self._fh = None
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        text = self.path.read_text(encoding="utf-8")
        lines = split_lines(text)
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
        self._recorded_server = header.get("server")
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
            self._keep(rec, _dumps(rec))
        log.info("resuming %s: %d items already scored", self.path, len(self.records))

    @property
    def recorded_server(self) -> dict | None:
        """The server the checkpointed records were scored on, as recorded in the checkpoint's header."""
        return self._recorded_server

    def bind_server(self, now: ServerIdentity, verify: Callable[[], None]) -> ServerIdentity:
        """Score the rest on the server read as NOW: refused (:class:`ServerChangedError`, the checkpoint untouched)
        when it is not the server the checkpointed records were scored on; VERIFY runs before each later write.
        Returns the reference identity (the recorded one when resuming, else NOW)."""
        held = len(self.records) + len(self.extras)
        if held and self._recorded_server is None:
            raise ServerChangedError(str(self.path), [f"its {held} records name no server (an older checkpoint)"])
        if held:
            from anyjev.run.server_check import ServerIdentity, differences

            recorded = ServerIdentity.from_dict(self._recorded_server)
            found = differences(recorded, now)
            if found:
                raise ServerChangedError(str(self.path), found)
            self.server = recorded
        else:
            self.server = now
            if self.path.exists():  # a header and nothing else: begin again under this server
                self.path.unlink()
        self._verify = verify
        return self.server

    def _open(self):
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            self._fh = open(self.path, "a", encoding="utf-8")
            if new:
                header = {"type": "header", "format": FORMAT, "identity": self.identity}
                if self.server is not None:
                    header["server"] = self.server.to_dict()
                self._write(header)
        return self._fh

    def _truncate_to(self, lines: list[str]) -> None:
        write_text_atomic(self.path, "".join(line + "\n" for line in lines))

    def _write(self, obj: dict) -> None:
        self._fh.write(_dumps(obj) + "\n")

    def _keep(self, rec: dict, line: str) -> None:
        (self.records if is_item(rec) else self.extras)[rec["id"]] = rec
        self._lines[rec["id"]] = line

    def add(self, records: Iterable[dict]) -> None:
        """Checkpoint RECORDS (after the server is checked again, when one is bound), in one write."""
        records = list(records)
        if self._verify is not None:
            self._verify()
        fh = self._open()
        lines = [_dumps(rec) for rec in records]
        fh.write("".join(line + "\n" for line in lines))
        for rec, line in zip(records, lines, strict=True):
            self._keep(rec, line)
        fh.flush()
        os.fsync(fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def finalise(self, out: str | os.PathLike, order: list[str]) -> None:
        """Write the final file in task order (atomically) and remove the checkpoint."""
        self.close()
        missing = [i for i in order if i not in self.records]
        if missing:
            raise RuntimeError(f"cannot finalise {out}: {len(missing)} items unscored (first: {missing[:3]})")
        server = self.server.to_dict() if self.server is not None else self._recorded_server
        # the lines the records were checkpointed as: write_scores' bytes, without encoding every record again
        _write_lines(out, self.identity, [self._lines[i] for i in [*order, *sorted(self.extras)]], server=server)
        self.path.unlink(missing_ok=True)


def write_scores(out: str | os.PathLike, identity: dict, records: list[dict], *, server: dict | None = None) -> None:
    """The final scores file: its header (identity, and the server the records were scored on when known), then
    RECORDS."""
    _write_lines(out, identity, list(map(_dumps, records)), server=server)


def _write_lines(out: str | os.PathLike, identity: dict, lines: list[str], *, server: dict | None) -> None:
    header = {"type": "header", "format": FORMAT, "identity": identity} | ({"server": server} if server else {})
    write_text_atomic(out, "".join(line + "\n" for line in [_dumps(header), *lines]))
