"""Memory and time of the score jobs per model (models.<name>.mem_mb / runtime): the library returns plain per-model
numbers, and workflow/rules/common.smk makes Snakemake resources of them (tests/e2e/test_paper_config.py checks the jobs'
resources)."""

from __future__ import annotations

import re

import pytest

from anyjev.config import validate_config
from anyjev.errors import ConfigError
from anyjev.settings import SCORE_RESOURCES, Settings
from tests.conftest import REPO

PROFILE = {"mem_mb": 4000, "runtime": 60}  # the profile's default-resources, as common.smk reads them


def settings(**models) -> Settings:
    config = {"models": {n: {"source": "smollm2", **m} for n, m in models.items()},
              "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    return Settings.from_config(validate_config(config))


def test_no_model_sets_them_so_the_profile_decides() -> None:
    assert settings(a={}, b={}).score_resources(PROFILE) == {}


def test_per_model_values_and_the_profile_default_for_the_others() -> None:
    assert settings(a={"mem_mb": 64000, "runtime": 240}, b={}).score_resources(PROFILE) == {
        "mem_mb": {"a": 64000, "b": 4000}, "runtime": {"a": 240, "b": 60}}
    assert settings(a={"mem_mb": 64000}, b={"mem_mb": 8000}).score_resources({}) == {"mem_mb": {"a": 64000, "b": 8000}}


def test_a_null_model_without_a_profile_default_is_named() -> None:
    with pytest.raises(ConfigError, match="config key models.b.mem_mb: is null while another model sets it"):
        settings(a={"mem_mb": 64000}, b={}).score_resources({})
    with pytest.raises(ConfigError, match="models.b.runtime"):
        settings(a={"runtime": 60}, b={}).score_resources({"runtime": True})


def test_the_library_holds_no_snakemake_resource() -> None:
    """Only the workflow makes Snakemake's functions of wildcards: the settings give numbers, for the keys common.smk
    asks the profile for."""
    per_model = settings(a={"mem_mb": 64000, "runtime": 240}, b={}).score_resources(PROFILE)
    assert all(isinstance(v, int) for values in per_model.values() for v in values.values())
    assert set(per_model) <= set(SCORE_RESOURCES) == {"mem_mb", "runtime"}
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert re.search(r"SETTINGS\.score_resources\(defaults\)", common)
