"""The config schema, packaged with the library (``anyjev/config.schema.yaml``): every setting's name, description
and default, in one place.

The workflow validates its config against this file (:mod:`anyjev.config`), and every default the library uses for
a config setting is read from it with :func:`setting`, so no default is written twice (``tests/unit/test_settings.py``
walks the schema and every job type to prove it). Importing this module reads nothing outside the package.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from importlib import resources
from typing import Any

import yaml

SCHEMA_FILE = "config.schema.yaml"
SCHEMA_KEY = "schema_key"  # dataclass field metadata: the config key path a field's default comes from


@functools.cache
def _schema() -> dict[str, Any]:
    return yaml.safe_load(resources.files("anyjev").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def schema() -> dict[str, Any]:
    """The whole schema (a fresh copy: callers may fill defaults into what they validate)."""
    return copy.deepcopy(_schema())


def schema_node(*keys: str) -> dict[str, Any]:
    """The schema of a config key path; ``*`` steps into a name-keyed mapping (``models.*.dtype``). KeyError when the
    path does not exist."""
    node = _schema()
    for key in keys:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    return node


def default(*keys: str) -> Any:
    """The schema's default of a config key path (a fresh copy)."""
    return copy.deepcopy(schema_node(*keys)["default"])


def setting(*keys: str) -> Any:
    """A dataclass field whose default is the schema's default of the config key path KEYS (a fresh copy per
    instance); the path is kept in the field's metadata, so a test can find every field that stands for a setting."""
    schema_node(*keys)["default"]  # fail at import time, naming the path, when it has no default
    return dataclasses.field(default_factory=functools.partial(default, *keys), metadata={SCHEMA_KEY: keys})
