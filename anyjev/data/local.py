"""A declared dataset in a local folder: which ``dataset`` values name one, its files, and the content hash that pins
it (a folder has no commit).

``datasets.load_dataset`` reads a local folder as it reads a hub repo. A declaration names a folder by a path that
starts with ``/``, ``./`` or ``../`` (relative to the workflow's working directory), so that whether a dataset comes
from the hub never depends on what folders exist on the machine. The folder's files are the ones ``datasets`` would
see: every regular file below it except those ``datasets`` skips unless asked (a name starting with ``.``, or inside a
folder whose name starts with ``.`` or ``__``). Their list is what the workflow's fetch step takes as its inputs, and their sha256 digests,
combined, are what the cache, the provenance and the lock file record.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from anyjev.files import file_sha256

LOCAL_PREFIXES = ("/", "./", "../")


def is_local(dataset: str) -> bool:
    """DATASET names a local folder (a path starting with /, ./ or ../), not a hub id."""
    return dataset.startswith(LOCAL_PREFIXES) or dataset in (".", "..")


def local_files(folder: str | os.PathLike) -> list[Path]:
    """The folder's data files, sorted by their path below it: every regular file but those datasets skips."""
    root = Path(folder)
    found = []
    for here, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        found += [Path(here) / f for f in sorted(files) if not f.startswith(".") and (Path(here) / f).is_file()]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def local_content(folder: str | os.PathLike) -> tuple[str, dict[str, str]]:
    """The folder's content hash and each file's sha256 (by its path below the folder, with /). The hash is the sha256
    of the lines ``<sha256>  <path>`` (sha256sum's format), one per file in path order: it changes when a file's
    bytes, its name or the set of files change."""
    root = Path(folder)
    files = {p.relative_to(root).as_posix(): file_sha256(p) for p in local_files(root)}
    listing = "".join(f"{sha}  {rel}\n" for rel, sha in files.items())
    return hashlib.sha256(listing.encode("utf-8")).hexdigest(), files
