"""The model's tokenizer, loaded from its folder on disk and never from the hub: a folder that is missing or holds no
tokenizer is one line naming the folder and what it lacks, at once (transformers would take a missing folder for a
hub repo id and retry the network for minutes)."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from anyjev.decision.labels import LabelChecker
from anyjev.errors import ArgumentError, NotWritableError, one_line
from anyjev.files import user_cache, write_text_atomic

log = logging.getLogger(__name__)

# What transformers builds a tokenizer from: one of these (a `tokenizers` serialization, a sentencepiece model, a BPE
# vocabulary with its merges, a WordPiece vocabulary).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json + merges.txt", "vocab.txt")
# The files that decide how a prompt renders and tokenises: models whose folders hold the same bytes here (models of
# one family) share one tokenizer, and their prompts are rendered once for all of them.
RENDERING_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json",
                   "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")


def _folder(path: str | os.PathLike[str], where: str) -> Path:
    folder = Path(path)
    if not folder.exists():
        raise ArgumentError(where, f"no such folder (looked in {folder.resolve().parent}); a tokenizer is read from a "
                            "folder on disk, never from the hub")
    if not folder.is_dir():
        raise ArgumentError(where, "is a file: name the folder that holds the tokenizer's files")
    return folder


def check_tokenizer(path: str | os.PathLike[str], *, argument: str = "tokenizer folder") -> None:
    """That the folder PATH holds a tokenizer scoring can load, as :func:`load_tokenizer` says it, without importing
    transformers (nor torch) where the folder holds ``tokenizer.json``: the `tokenizers` library reads it, and
    ``tokenizer_config.json`` must be JSON. A readable answer is kept per content (the files' real paths, sizes and
    times): the folders of models that link the same files are read once a process, and once for every later process
    of the machine's user (every parse of the workflow validates the config: :func:`_unreadable`). A folder without
    ``tokenizer.json`` is loaded through transformers."""
    where = f"{argument} {str(path)!r}"
    folder = _folder(path, where)
    if not (folder / "tokenizer.json").is_file():
        load_tokenizer(path, argument=argument)
        return
    files = tuple((name, os.path.realpath(folder / name), (st := (folder / name).stat()).st_size, st.st_mtime_ns)
                  for name in CHECKED_FILES if (folder / name).is_file())
    why = _unreadable(files)
    if why is not None:
        raise ArgumentError(where, f"no tokenizer could be loaded: {why}")


CHECKED_FILES = ("tokenizer.json", "tokenizer_config.json")


@functools.cache
def _unreadable(files: tuple[tuple[str, str, int, int], ...]) -> str | None:
    """Why the tokenizer of FILES ((name, real path, size, mtime) each) cannot be read, None when it can. That they
    can is remembered in the user's cache (a file named by FILES' hash), so that a later process does not read them
    again while they stay as they are; that they cannot is found again each time, and said as it is then."""
    readable = user_cache("tokenizer-checks") / f"{hashlib.sha256(repr(files).encode()).hexdigest()[:32]}.json"
    if readable.is_file():
        return None
    from tokenizers import Tokenizer

    for name, real, _, _ in files:
        try:
            if name == "tokenizer.json":
                Tokenizer.from_file(real)
            else:
                json.loads(Path(real).read_text(encoding="utf-8"))
        except Exception as exc:  # noqa: BLE001 - the tokenizers library raises Exception for a bad file
            return f"it holds {name}, which cannot be read ({type(exc).__name__}: {one_line(str(exc), 200)})"
    try:
        write_text_atomic(readable, json.dumps({"readable": [list(f) for f in files]}))
    except (OSError, NotWritableError) as exc:  # a cache that cannot be written costs the next check its time only
        log.debug("not remembering that %s can be read: %s", files, exc)
    return None


def load_tokenizer(path: str | os.PathLike[str], *, argument: str = "tokenizer folder"):
    """The tokenizer in the folder PATH (transformers, local files only). ArgumentError names ARGUMENT (the flag or
    config key that gave the folder), the folder and what is missing.

    transformers' AutoTokenizer imports torch (its model configurations import the generation code), about 2.5 CPU s
    of a scoring job that needs no torch. So the class AutoTokenizer chose for a folder's files is remembered
    (:func:`_remembered_class`), and a later load calls that class's own ``from_pretrained``, as AutoTokenizer does
    once it has chosen, without the import."""
    where = f"{argument} {str(path)!r}"
    folder = _folder(path, where)
    remembered = _remembered_class(folder)
    if remembered is not None:
        try:
            return remembered.from_pretrained(str(folder), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - AutoTokenizer below loads it, or says what is wrong
            log.debug("%s does not load %s (%s): loading it through AutoTokenizer", remembered.__name__, folder, exc)
    try:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError... for a bad folder
        present = [name for name in TOKENIZER_FILES if all((folder / part).is_file() for part in name.split(" + "))]
        lacks = ("it holds none of " + ", ".join(TOKENIZER_FILES) if not present else
                 f"it holds {', '.join(present)}, which transformers cannot load")
        raise ArgumentError(where, f"no tokenizer could be loaded: {lacks} ({type(exc).__name__}: "
                            f"{one_line(str(exc), 200)})") from None
    _remember_class(folder, tokenizer)
    return tokenizer


# What AutoTokenizer's choice of class depends on, besides RENDERING_FILES: the model's configuration (its model type)
# and the folder's path (a hub-id pattern is matched against it).
CHOICE_FILES = ("config.json",)


def _choice_file(folder: Path) -> Path:
    """The file in the user's cache that remembers AutoTokenizer's class for FOLDER as it is now (its path, its
    rendering and configuration files' bytes, the transformers version)."""
    from importlib.metadata import version

    digest = hashlib.sha256(f"{folder.resolve()}\0transformers {version('transformers')}\0".encode())
    digest.update(_files_digest(folder, (*RENDERING_FILES, *CHOICE_FILES)).encode())
    return user_cache("tokenizers") / f"{digest.hexdigest()[:32]}.json"


def _remembered_class(folder: Path) -> type | None:
    """The tokenizer class AutoTokenizer chose for FOLDER's files before, or None (never loaded, or not a tokenizer
    class that transformers exports by its name)."""
    try:
        name = json.loads(_choice_file(folder).read_text(encoding="utf-8"))["class"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import transformers

    cls = getattr(transformers, str(name), None)
    return cls if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedTokenizerBase) else None


def _fingerprint(tokenizer: Any) -> tuple:
    """What a tokenizer renders and tokenises with: its class and special tokens (its repr), chat template and
    vocabulary with its rules (the `tokenizers` serialization)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return repr(tokenizer), getattr(tokenizer, "chat_template", None), backend.to_str() if backend is not None else None


def _remember_class(folder: Path, tokenizer: Any) -> None:
    """Remember TOKENIZER's class for FOLDER, if transformers exports it by its name and that class loads FOLDER into
    the same tokenizer (a class AutoTokenizer gave extra arguments, or one from the folder's own code, is not)."""
    cls = type(tokenizer)
    import transformers

    if getattr(transformers, cls.__name__, None) is not cls:
        return
    try:
        same = _fingerprint(cls.from_pretrained(str(folder), local_files_only=True)) == _fingerprint(tokenizer)
        if same:
            write_text_atomic(_choice_file(folder), json.dumps({"class": cls.__name__, "folder": str(folder.resolve())}))
    except Exception as exc:  # noqa: BLE001 - a cache that cannot be written costs the next load its time only
        log.debug("not remembering %s for %s: %s", cls.__name__, folder, exc)


def _files_digest(folder: str | os.PathLike[str], names: tuple[str, ...]) -> str:
    """A hash of the names and bytes of those of NAMES that are files in FOLDER."""
    digest = hashlib.sha256()
    for name in names:
        path = Path(folder) / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def rendering_key(tok_dir: str) -> str:
    """What decides TOK_DIR's rendering and tokenisation: a hash of its RENDERING_FILES' names and bytes."""
    return _files_digest(tok_dir, RENDERING_FILES)


class Tokenizers:
    """Each distinct tokenizer loaded once (models whose folders render alike share one), with its label checker:
    ``anyjev plan`` and the viewer render a task's prompts once per distinct tokenizer, not once per model."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[Any, LabelChecker]] = {}
        self._keys: dict[str, str] = {}

    def key(self, tok_dir: str) -> str:
        if tok_dir not in self._keys:
            self._keys[tok_dir] = rendering_key(tok_dir)
        return self._keys[tok_dir]

    def get(self, tok_dir: str) -> tuple[Any, LabelChecker]:
        key = self.key(tok_dir)
        if key not in self._loaded:
            log.info("loading the tokenizer in %s", tok_dir)
            tokenizer = load_tokenizer(tok_dir)
            self._loaded[key] = (tokenizer, LabelChecker(tokenizer))
        return self._loaded[key]
