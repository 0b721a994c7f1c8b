"""Local folders laid out like Hugging Face hub dataset repos, read by the real `datasets` library.

Shared by the hub-path unit tests (tests/unit/test_hub_lock.py) and the CPU dress rehearsal of config/paper.yaml
(tests/e2e/rehearsal.py): `datasets.load_dataset(<folder>)` reads them as it reads the hub repo, with the same
columns, feature types and splits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

# What every hub revision resolves to once go_offline has run (a 40-hex revision resolves to itself).
OFFLINE_COMMIT = "c" * 40


def write_hub_repo(root: Path, splits: dict[str, dict[str, list]], features, config: str | None = None) -> Path:
    """A local folder holding a hub dataset repo's parquet files as the hub lays them out: data/<split>-*.parquet,
    or <config>/<split>-*.parquet declared in the README's `configs:` block for a dataset with named configs."""
    import datasets

    folder = root / (config or "data")
    folder.mkdir(parents=True, exist_ok=True)
    for split, columns in splits.items():
        datasets.Dataset.from_dict(columns, features=features).to_parquet(folder / f"{split}-00000-of-00001.parquet")
    if config:
        card = {"configs": [{"config_name": config, "data_files": [{"split": s, "path": f"{config}/{s}-*"} for s in splits]}]}
        (root / "README.md").write_text(f"---\n{yaml.safe_dump(card)}---\n")
    return root


def go_offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No network: the hub is off, `datasets` caches under TMP_PATH (the working directory from now on), and a
    revision resolves to OFFLINE_COMMIT."""
    import datasets

    import anyjev.data.hub as hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(hub, "resolve_commit",
                        lambda kind, repo, revision: revision if revision and len(revision) == 40 else OFFLINE_COMMIT)
    monkeypatch.chdir(tmp_path)
