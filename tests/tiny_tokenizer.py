"""A tokenizer folder that loads (a two-word `tokenizers` vocabulary), for configs whose `url` model's tokenizer only
has to pass the config check: the check loads it (anyjev.decision.tokenizer)."""

from __future__ import annotations

from pathlib import Path


def write_tiny_tokenizer(folder: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder
