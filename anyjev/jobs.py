"""The job contract: what a workflow rule hands the library, as one typed object.

Each step owns the type of its job (``PrepareJob`` in :mod:`anyjev.data.prepare`, ``ScoreJob`` in
:mod:`anyjev.run.cell`, ...); :class:`anyjev.settings.Settings` builds every job once from the validated config; a
rule writes it as a file named by its content (:meth:`Job.to_file`) and passes the file's path (``--job
.anyjev/jobs/ScoreJob-<digest>.json``); the command line parses it back into the same type with
:meth:`Job.from_json`, refusing a key it does not know or a key it misses (naming the key path), and hands the
typed object on. A setting therefore has one name from the schema to the function that uses it, and cannot be
dropped on the way: a field that is not in the type is an error, not a silently ignored key, and a field the JSON
lacks is an error too, not a default filled in silently (the rule wrote every field; one it lacks was lost).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import types
import typing
from pathlib import Path
from typing import Any, Self, TypeVar

from anyjev.errors import ArgumentError, ConfigError
from anyjev.files import write_text_atomic

T = TypeVar("T")


def to_data(obj: Any) -> Any:
    """A job (or any value inside one) as JSON-ready data: dataclasses as dicts, tuples as lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, list | tuple):
        return [to_data(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_data(v) for k, v in obj.items()}
    return obj


def _convert(hint: Any, value: Any, where: str, complete: bool) -> Any:
    """VALUE read back as the type HINT (nested dataclasses, optional values, tuples, dicts, plain scalars); COMPLETE
    as in :func:`from_data`, for every dataclass inside."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(where, "is null, but a value is required")
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:  # an optional value: its own error names the key that is wrong inside it
            return _convert(present[0], value, where, complete)
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where, complete)
            except ConfigError:
                continue
        raise ConfigError(where, f"{value!r:.80} is none of {', '.join(getattr(a, '__name__', str(a)) for a in args)}")
    if dataclasses.is_dataclass(hint):
        return from_data(hint, value, where, complete=complete)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(where, f"expected a list, got {value!r:.80}")
        args = typing.get_args(hint)
        item = args[0] if args else Any
        return tuple(_convert(item, v, f"{where}[{i}]", complete) for i, v in enumerate(value))
    if origin is list:
        if not isinstance(value, list | tuple):
            raise ConfigError(where, f"expected a list, got {value!r:.80}")
        (item,) = typing.get_args(hint) or (Any,)
        return [_convert(item, v, f"{where}[{i}]", complete) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(where, f"expected a mapping, got {value!r:.80}")
        _, item = typing.get_args(hint) or (str, Any)
        return {k: _convert(item, v, f"{where}.{k}", complete) for k, v in value.items()}
    if hint is bool and not isinstance(value, bool):
        raise ConfigError(where, f"expected true or false, got {value!r:.80}")
    if hint is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(where, f"expected an integer, got {value!r:.80}")
    if hint is float and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ConfigError(where, f"expected a number, got {value!r:.80}")
    if hint is str and not isinstance(value, str):
        raise ConfigError(where, f"expected a string, got {value!r:.80}")
    return float(value) if hint is float else value


def from_data(cls: type[T], data: Any, where: str = "job", *, complete: bool = False) -> T:
    """Build the dataclass CLS from DATA (a JSON mapping), refusing unknown and missing keys, naming their path.

    A key is missing when DATA lacks a field that has no default; with COMPLETE (a job's JSON, which names every
    field), when DATA lacks any field. Without it (a config section, whose optional keys without a schema default
    may be absent) an absent field takes its default."""
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping for {cls.__name__}, got {data!r:.80}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown key for {cls.__name__} (known: {', '.join(sorted(fields))})")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, f in fields.items():
        if name not in data:
            if complete or (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING):
                raise ConfigError(f"{where}.{name}", f"missing (every {cls.__name__} names it)")
            continue
        values[name] = _convert(hints[name], data[name], f"{where}.{name}", complete)
    return cls(**values)


class Job:
    """Mixin for the frozen dataclass a rule hands its job: one JSON file there, the same type here."""

    def to_json(self) -> str:
        """The job as JSON (sorted keys): what its file holds."""
        return json.dumps(to_data(self), sort_keys=True)

    def digest(self) -> str:
        """What names the job: 16 hex digits of the SHA-256 of its JSON (the same job, the same digest)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_file(self, folder: str | os.PathLike) -> str:
        """The job as a file in FOLDER named by its type and its digest (``ScoreJob-<16 hex>.json``), written once
        (atomically: a file of that name already holds this job); returns its path. A rule passes this path as its
        job: a changed setting is a new name, so Snakemake's params trigger reruns the job, and the command line it
        prints stays short."""
        text = self.to_json()
        path = self.file_of(folder, hashlib.sha256(text.encode()).hexdigest()[:16])
        if not path.is_file():
            write_text_atomic(path, text + "\n")
        return str(path)

    @classmethod
    def file_of(cls, folder: str | os.PathLike, digest: str) -> Path:
        """Where :meth:`to_file` keeps the job of this type named DIGEST in FOLDER."""
        return Path(folder) / f"{cls.__name__}-{digest}.json"

    @classmethod
    def from_json(cls, text_or_path: str) -> Self:
        """The job from its file (or from its JSON text), as this type; ConfigError names a bad key, ArgumentError an
        argument that is neither JSON nor a readable file."""
        text = text_or_path
        if not text_or_path.lstrip().startswith("{"):
            try:
                text = Path(text_or_path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise ArgumentError("--job", f"{text_or_path!r:.200} is neither a JSON object nor a readable file holding "
                                    f"one ({type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) else exc})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ArgumentError("--job", f"not JSON ({exc})") from None
        return from_data(cls, data, "job", complete=True)
