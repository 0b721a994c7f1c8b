"""Exceptions raised by anyjev. Every message names the culprit (field, file:line, token id, URL)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from html.parser import HTMLParser


class AnyjevError(Exception):
    """Base class for every error anyjev raises on purpose."""


class InputError(AnyjevError):
    """The input is wrong (a config value, a task file, a command's argument): the user fixes it, nothing is retried.
    A command exits 2 on it; every other error is a failure of the work (exit 1)."""


class ArgumentError(InputError, ValueError):
    """A command's argument (a file or folder it reads, a JSON job) is wrong; names the argument."""

    def __init__(self, argument: str, why: str) -> None:
        self.argument = argument
        self.why = why
        super().__init__(f"{argument}: {why}")


class QuestionError(InputError, ValueError):
    """A question is malformed; the message names the field and the offending value."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field = field
        self.value = value
        super().__init__(f"invalid question field {field!r} = {value!r}: {why}")


class TaskDataError(InputError, ValueError):
    """A task file is unreadable or holds an invalid item; names the file and line or item id."""

    def __init__(self, path: str, where: str, why: str) -> None:
        self.path = path
        self.where = where
        super().__init__(f"{path}:{where}: {why}")


class FileFormatError(TaskDataError):
    """A file anyjev reads back (a run's ``metrics.json``, ``predictions.csv``, ``scores.jsonl``, a table made from
    them, the viewer's page template) is missing, empty or not in its format; names the file and where in it."""


class ConfigError(InputError, ValueError):
    """A configuration value is invalid; names the key path, and the file it came from once that is known."""

    def __init__(self, key_path: str, why: str, source: str | None = None) -> None:
        self.key_path = key_path
        self.why = why
        self.source = source
        super().__init__((f"{source}: " if source else "") + f"config key {key_path}: {why}")

    def located(self, source: str) -> ConfigError:
        """The same error naming SOURCE, the file (or command-line option) the key's value came from."""
        return self if self.source else ConfigError(self.key_path, self.why, source)


class ConfigSyntaxError(ConfigError):
    """A config file cannot be parsed; names the file, line and column."""

    def __init__(self, where: str, why: str) -> None:
        self.key_path = where
        self.why = why
        self.source = where
        AnyjevError.__init__(self, f"{where}: {why}")


class NotWritableError(AnyjevError):
    """A folder a step writes into cannot be written (read-only, not ours, a read-only filesystem); names it."""

    def __init__(self, folder: str, why: str) -> None:
        self.folder = folder
        super().__init__(f"{folder} cannot be written ({why}): make it writable (chmod u+w {folder}) and run again; "
                         "items already checkpointed are kept")


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

    def within(self, context: str) -> LabelTokenError:
        """The same error, of the same type (a batch collision stays one) and with the same ids, saying where it
        happened: CONTEXT before its message."""
        return type(self)(f"{context}: {self}", missing_ids=self.missing_ids, returned_ids=self.returned_ids)


class BatchCollisionError(LabelTokenError):
    """A label request came back with only its sampled label and padding: it shared an engine batch with a request
    that set ``logprob_token_ids`` (vLLM 0.32's V1 sampler), not a server in the wrong logprobs mode."""


class BackendError(AnyjevError):
    """A backend could not deliver scores (transport failure, HTTP error, malformed response)."""


class UnauthorizedError(BackendError):
    """A server answered 401 Unauthorized: it requires an API key, and the request carried none or another."""


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


_HTML = re.compile(r"<\s*(!doctype|html|head|body|title|h[1-6]|p|div|center|pre)\b", re.I)


class _TextOf(HTMLParser):
    """The visible text of an HTML page, in chunks (script and style left out)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._hidden -= tag in ("script", "style") and self._hidden > 0

    def handle_data(self, data: str) -> None:
        text = " ".join(data.split())
        if text and not self._hidden and (not self.chunks or self.chunks[-1] != text):
            self.chunks.append(text)


def one_line(text: str, limit: int | None = None) -> str:
    """TEXT as one line for a message: an HTML page (a proxy's or a web server's error page) reduced to its visible
    text, whitespace collapsed, cut after LIMIT characters at a space."""
    if _HTML.search(text):
        parser = _TextOf()
        parser.feed(text)
        parser.close()
        text = " ".join(parser.chunks)
    line = " ".join(text.split())
    if limit is None or len(line) <= limit:
        return line
    return line[:limit].rsplit(" ", 1)[0] + " ..."
