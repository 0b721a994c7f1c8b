"""Exceptions raised by anyjev. Every message names the culprit (field, file:line, token id, URL)."""

from __future__ import annotations

from collections.abc import Sequence


class AnyjevError(Exception):
    """Base class for every error anyjev raises on purpose."""


class QuestionError(AnyjevError, ValueError):
    """A question is malformed; the message names the field and the offending value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"invalid question field {field!r} = {value!r}: {why}")


class TaskDataError(AnyjevError, ValueError):
    """A task file is unreadable or holds an invalid item; names the file and line or item id."""

    def __init__(self, path: str, where: str, why: str) -> None:
        self.path = path
        self.where = where
        super().__init__(f"{path}:{where}: {why}")


class FileFormatError(TaskDataError):
    """A file anyjev reads back (a run's ``metrics.json``, ``predictions.csv``, ``scores.jsonl``, a table made from
    them, the viewer's page template) is missing, empty or not in its format; names the file and where in it."""


class ConfigError(AnyjevError, ValueError):
    """A configuration value is invalid; names the key path."""

    def __init__(self, key_path: str, why: str) -> None:
        self.key_path = key_path
        super().__init__(f"config key {key_path}: {why}")


class ConfigSyntaxError(ConfigError):
    """A config file cannot be parsed; names the file, line and column."""

    def __init__(self, where: str, why: str) -> None:
        self.key_path = where
        AnyjevError.__init__(self, f"{where}: {why}")


class LabelTokenError(AnyjevError):
    """Label tokens cannot be read faithfully: a label is not one token in context, two labels
    collide, or a server did not return every label's log-probability.

    This is the error that prevents the silent failure this project exists for: never replace a
    missing label with a fill value.
    """

    def __init__(self, message: str, *, missing_ids: Sequence[int] = (), returned_ids: Sequence[int] = ()) -> None:
        self.missing_ids = list(missing_ids)
        self.returned_ids = list(returned_ids)
        super().__init__(message)


class BatchCollisionError(LabelTokenError):
    """A label request came back with only its sampled label and padding: it shared an engine batch with a request
    that set ``logprob_token_ids`` (vLLM 0.32's V1 sampler), not a server in the wrong logprobs mode."""


class BackendError(AnyjevError):
    """A backend could not deliver scores (transport failure, HTTP error, malformed response)."""


class ServerError(AnyjevError):
    """A model server could not be started, became unhealthy, or is not the expected model."""


class ServerChangedError(ServerError):
    """The server a cell talks to is not the one its checkpointed items were scored on (on resume), or it changed
    while the cell was being scored; names what changed. Nothing from the other server is written."""

    def __init__(self, where: str, changes: list[str], *, during: bool = False) -> None:
        self.where = where
        self.changes = list(changes)
        what = "; ".join(changes)
        if during:
            message = (f"{where}: the server changed while the cell was being scored ({what}); the items read since the "
                       f"last checkpoint are not written. Score the cell again against one server")
        else:
            message = (f"{where}: the server is not the one the checkpointed items were scored on ({what}). Serve the "
                       f"cell from that server again, or delete {where} to score it afresh")
        super().__init__(message + ".")
