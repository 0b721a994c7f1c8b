"""Which config made each finished file of a run's folder, and under which definition: a run of another config that
would replace one of them under another definition is refused before any job (docs/configuration.md, "A study in a
folder of its own").

Snakemake removes a job's outputs before the job runs, and again when it fails; a job whose outputs are another
config's finished files (a task or a model name reused with another definition) would delete them even when it
fails. So when a run starts, before any job, the workflow claims the files each job that will run makes: the
definition it makes them under (the job files it hands its commands, :mod:`anyjev.jobs`, named by their content) and
the config that asked for them. A job that would replace a file there, claimed under another definition by runs of
other configs only, is refused, in one line naming the config key, the files and the ways out. The same config,
edited (a setting changed), replaces its own files as Snakemake does; a config whose definition is the same shares
the files (its jobs do not run again).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from anyjev.files import flock, write_json_atomic

FORMAT = "anyjev.claims/1"


@dataclass(frozen=True)
class Claim:
    """The files one job makes (FILES) and what defines them (DEFINITION: job files), under the config key a person
    would change (KEY: ``tasks.mmlu``, ``models.m``; a cell's ``cell m/mmlu``)."""

    key: str
    files: tuple[str, ...]
    definition: tuple[str, ...]


def config_name(configfiles: Iterable[str | os.PathLike[str]], workdir: str | os.PathLike[str] = ".") -> str:
    """The config a run is made from, as its files: each relative to the working directory when it lies inside it
    (the same config wherever the folder is), else its resolved path; several joined with ' + '."""
    root = Path(workdir).resolve()
    names = []
    for path in configfiles:
        resolved = Path(path).resolve()
        names.append(str(resolved.relative_to(root)) if resolved.is_relative_to(root) else str(resolved))
    return " + ".join(names)


def read_claims(path: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """Each claimed file: ``{"definition": [job files], "configs": [configs that made it under that definition]}``; none
    when there is no readable record."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record.get("files", {}) if isinstance(record, dict) and record.get("format") == FORMAT else {}


def differences(ours: Any, theirs: Any, where: str = "") -> list[str]:
    """Where two job files' data differ, in words: ``source: 'builtin' -> 'file'`` (theirs -> ours), key by key."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return [d for key in sorted(set(ours) | set(theirs))
                for d in differences(ours.get(key), theirs.get(key), f"{where}.{key}" if where else str(key))]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        return [d for n, (a, b) in enumerate(zip(ours, theirs, strict=True)) for d in differences(a, b, f"{where}[{n}]")]
    return [] if ours == theirs else [f"{where or 'the job'}: {theirs!r:.60} -> {ours!r:.60}"]


def _what_differs(ours: tuple[str, ...], theirs: list[str]) -> str | None:
    """How two definitions differ, read from their job files of the same type (when both are here): the first three
    differences."""
    kinds = {Path(p).name.rsplit("-", 1)[0]: p for p in theirs}
    for path in ours:
        kind = Path(path).name.rsplit("-", 1)[0]
        other = kinds.get(kind)
        if other is None or other == path:
            continue
        try:
            found = differences(json.loads(Path(path).read_text()), json.loads(Path(other).read_text()))
        except (OSError, ValueError):
            continue
        if found:
            return f"{kind} " + ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
    return None


def refusals(path: str | os.PathLike[str], claims: Iterable[Claim], config: str) -> list[str]:
    """One line per config key whose job would replace files there that runs of other configs made under another
    definition (PATH: the claims record): what differs, the files, the ways out. None when every file is free, this
    CONFIG's own, or made under the same definition."""
    made = read_claims(path)
    by_key: dict[str, tuple[list[str], set[str], str | None]] = {}
    for claim in claims:
        for file in claim.files:
            theirs = made.get(file)
            if theirs is None or tuple(theirs["definition"]) == claim.definition or config in theirs["configs"]:
                continue
            if not os.path.exists(file):
                continue
            files, configs, differs = by_key.setdefault(claim.key, ([], set(), _what_differs(claim.definition,
                                                                                               theirs["definition"])))
            files.append(file)
            configs.update(theirs["configs"])
    lines = []
    for key, (files, configs, differs) in by_key.items():
        shown = ", ".join(files[:4]) + (f" and {len(files) - 4} more" if len(files) > 4 else "")
        lines.append(f"{config}: {key} is not what {' and '.join(sorted(configs))} made its files from"
                     + (f" ({differs})" if differs else "") + f", and this run would replace them: {shown}. Give it "
                     "another name, run this config in a folder of its own (snakemake --directory DIR), or remove those "
                     "files to replace them on purpose")
    return lines


def record_claims(path: str | os.PathLike[str], claims: Iterable[Claim], config: str) -> None:
    """Record that CONFIG makes CLAIMS' files under their definitions (beside the configs that made them under the same
    definition before)."""
    with flock(f"{path}.lock"):
        made = read_claims(path)
        for claim in claims:
            for file in claim.files:
                before = made.get(file)
                same = before is not None and tuple(before["definition"]) == claim.definition
                configs = sorted(set(before["configs"]) | {config}) if same else [config]
                made[file] = {"definition": list(claim.definition), "configs": configs}
        write_json_atomic(path, {"format": FORMAT, "files": made})


def made_by(path: str | os.PathLike[str], file: str) -> list[str]:
    """The configs that made FILE, as claimed (none when it is not claimed)."""
    return list(read_claims(path).get(file, {}).get("configs", []))
