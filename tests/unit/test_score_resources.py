"""Memory and time of the score jobs per model (models.<name>.mem_mb / runtime), as score_cell's resources."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from anyjev.config import validate_config
from anyjev.errors import ConfigError
from anyjev.settings import Settings


class Site(dict):
    """The profile's default-resources as Snakemake hands them to a Snakefile (a mapping of objects with .value)."""

    def __init__(self, **values):
        super().__init__({k: SimpleNamespace(value=v) for k, v in values.items()})


def settings(**models) -> Settings:
    config = {"models": {n: {"source": "smollm2", **m} for n, m in models.items()},
              "tasks": {"t": {"source": "builtin", "builtin": "mmlu"}}, "published": None}
    return Settings.from_config(validate_config(config))


def test_no_model_sets_them_so_the_profile_decides() -> None:
    assert settings(a={}, b={}).score_resources(Site(mem_mb=4000, runtime=60)) == {}


def test_per_model_values_and_the_profile_default_for_the_others() -> None:
    res = settings(a={"mem_mb": 64000, "runtime": 240}, b={}).score_resources(Site(mem_mb=4000, runtime=60))
    assert {k: (f(SimpleNamespace(model="a")), f(SimpleNamespace(model="b"))) for k, f in res.items()} == {
        "mem_mb": (64000, 4000), "runtime": (240, 60)}


def test_a_null_model_without_a_profile_default_is_named() -> None:
    with pytest.raises(ConfigError, match="config key models.b.mem_mb: is null while another model sets it"):
        settings(a={"mem_mb": 64000}, b={}).score_resources(None)
