"""The model's tokenizer, loaded from its folder on disk and never from the hub: a folder that is missing or holds no
tokenizer is one line naming the folder and what it lacks, at once (transformers would take a missing folder for a
hub repo id and retry the network for minutes)."""

from __future__ import annotations

import os
from pathlib import Path

from anyjev.errors import ArgumentError, one_line

# What transformers builds a tokenizer from: one of these (a `tokenizers` serialization, a sentencepiece model, a BPE
# vocabulary with its merges, a WordPiece vocabulary).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json + merges.txt", "vocab.txt")


def load_tokenizer(path: str | os.PathLike[str], *, argument: str = "tokenizer folder"):
    """The tokenizer in the folder PATH (transformers, local files only). ArgumentError names ARGUMENT (the flag or
    config key that gave the folder), the folder and what is missing."""
    folder = Path(path)
    where = f"{argument} {str(path)!r}"
    if not folder.exists():
        raise ArgumentError(where, f"no such folder (looked in {folder.resolve().parent}); a tokenizer is read from a "
                            "folder on disk, never from the hub")
    if not folder.is_dir():
        raise ArgumentError(where, "is a file: name the folder that holds the tokenizer's files")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - transformers raises OSError, ValueError, KeyError... for a bad folder
        present = [name for name in TOKENIZER_FILES if all((folder / part).is_file() for part in name.split(" + "))]
        lacks = ("it holds none of " + ", ".join(TOKENIZER_FILES) if not present else
                 f"it holds {', '.join(present)}, which transformers cannot load")
        raise ArgumentError(where, f"no tokenizer could be loaded: {lacks} ({type(exc).__name__}: "
                            f"{one_line(str(exc), 200)})") from None
