"""The config schema, packaged with the library (``anyjev/config.schema.yaml``): every setting's name, description
and default, in one place.

The workflow validates its config against this file (:mod:`anyjev.config`), and every default the library uses for
a config setting is read from it with :func:`setting`, so no default is written twice (``tests/unit/test_settings.py``
walks the schema and every job type to prove it). The allowed values of a setting are the schema's too: a typed
options object checks its setting fields against their schema nodes (:func:`check_settings`), however it was built
(from the config, from a job's JSON, or by hand). Importing this module reads nothing outside the package.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from importlib import resources
from typing import Any

import yaml
from jsonschema import Draft202012Validator, validators

from anyjev.errors import ConfigError

SCHEMA_FILE = "config.schema.yaml"
SCHEMA_KEY = "schema_key"  # dataclass field metadata: the config key path a field's default comes from


@functools.cache
def _schema() -> dict[str, Any]:
    # libyaml's safe loader where PyYAML has it: every step's process reads the schema when it starts
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(resources.files("anyjev").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"), Loader=loader)


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


def allowed(*keys: str) -> tuple[Any, ...]:
    """The values the schema allows for the config key path KEYS (its ``enum``)."""
    return tuple(schema_node(*keys)["enum"])


def check_setting(value: Any, *keys: str) -> Any:
    """VALUE checked against the schema node of the config key path KEYS (a ConfigError naming the path when it is not
    allowed there, as in a config file); returns VALUE."""
    validate(copy.deepcopy(value), schema_node(*keys), ".".join(keys))
    return value


def check_settings(obj: Any) -> None:
    """Check every field of the dataclass instance OBJ that stands for a setting (made with :func:`setting`) against
    its schema node (:func:`check_setting`)."""
    for f in dataclasses.fields(obj):
        keys = f.metadata.get(SCHEMA_KEY)
        if keys is not None:
            check_setting(getattr(obj, f.name), *keys)


def _with_defaults(cls):
    validate_properties = cls.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return validators.extend(cls, {"properties": set_defaults})


_Validator = _with_defaults(Draft202012Validator)


def _path(parts) -> str:
    return ".".join(str(p) for p in parts) or "<top level>"


def _error(err, prefix: str) -> ConfigError:
    """A schema error as a ConfigError naming the key path (PREFIX, then the path inside the validated instance)."""
    where = _path([prefix, *err.absolute_path] if prefix else err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed)) if isinstance(err.instance, dict) else []
        keys = ", ".join(f"{where}.{k}" if where != "<top level>" else k for k in extra)
        return ConfigError(keys or where, f"unknown key (allowed here: {', '.join(allowed)})")
    if err.validator == "required" and isinstance(err.instance, dict):
        missing = [k for k in err.validator_value if k not in err.instance]
        if missing:
            return ConfigError(f"{where}.{missing[0]}" if where != "<top level>" else missing[0], f"required ({err.message})")
    if err.validator == "enum":
        return ConfigError(where, f"{err.instance!r:.80} is not one of {', '.join(map(str, err.validator_value))}")
    return ConfigError(where, f"{err.message} (value {err.instance!r:.80})")


def validate(instance: Any, node: dict[str, Any], prefix: str = "") -> Any:
    """Fill NODE's defaults into INSTANCE (in place) and check it against NODE (a part of the schema); the first error
    (outermost first) is raised as a ConfigError naming its key path, PREFIX first. Returns INSTANCE."""
    errors = sorted(_Validator(node).iter_errors(instance), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise _error(errors[0], prefix)
    return instance
