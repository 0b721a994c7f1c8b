"""Every key of the config schema says what it means (the workflow catalog and config/README.md readers
see the descriptions): walk the schema and name each key that has none."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from tests.conftest import REPO

SCHEMA = REPO / "anyjev" / "config.schema.yaml"


def keys(schema: dict, path: str = "") -> Iterator[tuple[str, dict]]:
    """(key path, sub-schema) of every key a config can hold: named properties, the entries of a
    name -> object mapping (``models.<name>``) and the object items of an array (``grid[]``)."""
    for name, sub in schema.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        yield here, sub
        yield from keys(sub, here)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and "properties" in extra:
        yield f"{path}.<name>", extra
        yield from keys(extra, f"{path}.<name>")
    items = schema.get("items")
    if isinstance(items, dict) and "properties" in items:
        yield f"{path}[]", items
        yield from keys(items, f"{path}[]")


def undescribed(schema: dict) -> list[str]:
    missing = [path for path, sub in keys(schema) if not str(sub.get("description", "")).strip()]
    if not str(schema.get("description", "")).strip():
        missing.insert(0, "<root>")
    return missing


def test_every_schema_key_has_a_description():
    schema = yaml.safe_load(SCHEMA.read_text())
    missing = undescribed(schema)
    assert not missing, f"{SCHEMA.relative_to(REPO)}: keys without a description: {', '.join(missing)}"


def test_the_walk_reaches_nested_keys():
    paths = {path for path, _ in keys(yaml.safe_load(SCHEMA.read_text()))}
    for expected in ("models", "models.<name>", "models.<name>.dtype", "tasks.<name>.n_test", "grid[]", "grid[].tasks",
                     "evaluation.prior_strength", "server.max_logprobs", "client.chunk_items", "published",
                     "tasks.<name>.hub.label_field"):
        assert expected in paths


def test_a_key_without_description_is_named():
    schema = {
        "description": "root",
        "properties": {
            "a": {"type": "object", "description": "a", "properties": {"b": {"type": "integer", "default": 1}}},
            "m": {"type": "object", "description": "m", "additionalProperties": {"type": "object", "properties": {
                "c": {"type": "string", "description": "c"}}}},
            "g": {"type": "array", "description": "g", "items": {"type": "object", "description": "g item", "properties": {
                "d": {"type": "string", "description": "   "}}}},
        },
    }
    assert undescribed(schema) == ["a.b", "m.<name>", "g[].d"]
