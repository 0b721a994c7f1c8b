"""What every reader of a run's files shares: a file that is there and not empty, a JSON object, a value of the type its
format gives it, a CSV table with typed columns. Each refusal is one :class:`~anyjev.errors.FileFormatError` naming the
file and where in it, never a parser's traceback, never a default filled in for a key the format requires.

The standard library and anyjev's errors alone at import: the steps that read one file of a run (publishing a cell,
evaluating one) import this module; pandas is imported by :func:`read_csv`, when a table is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyjev.errors import FileFormatError

if TYPE_CHECKING:
    import pandas as pd


def missing(path: str | os.PathLike) -> FileFormatError:
    """The error for a file that is not there."""
    return FileFormatError(str(path), "file", "missing")


def read_text(path: str | os.PathLike, *, empty: str = "empty file") -> str:
    """PATH's text: refused when it is missing, not UTF-8 or empty (EMPTY says what an empty one means)."""
    path = Path(path)
    if not path.is_file():
        raise missing(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FileFormatError(str(path), f"byte {exc.start}", "not UTF-8 text") from None
    if not text.strip():
        raise FileFormatError(str(path), "line 1", empty)
    return text


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """A JSON object from PATH."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(str(path), f"line {exc.lineno}", f"not JSON ({exc.msg}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise FileFormatError(str(path), "line 1", f"a JSON {type(data).__name__}, not an object")
    return data


def check_type(path: str | os.PathLike, where: str, value: object, kind: type | tuple[type, ...]) -> None:
    """Refuse VALUE (at WHERE in PATH) unless it is of KIND (a JSON bool is not an int)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = any(isinstance(value, k) and not (k is int and isinstance(value, bool)) for k in kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise FileFormatError(str(path), where, f"is {json.dumps(value)[:60]}, not a {names}")


def check_keys(path: str | os.PathLike, where: str, record: Mapping[str, Any], keys: Mapping[str, type | tuple[type, ...]],
               what: str) -> None:
    """Refuse RECORD (at WHERE in PATH; WHAT names it) unless it holds every one of KEYS, each of its type."""
    for key, kind in keys.items():
        if key not in record:
            raise FileFormatError(str(path), where, f"{what} lacks {key!r}")
        check_type(path, f"{where}: {key}", record[key], kind)


def read_csv(path: str | os.PathLike, columns: Mapping[str, str], *, comment: str | None = None) -> pd.DataFrame:
    """A CSV file with at least COLUMNS, each of its kind: ``text`` (kept as written), ``int`` or ``float`` (a number
    on every row), ``float?`` (a number or empty). Other columns are kept as pandas reads them (numbers, True/False,
    empty as NaN). COMMENT starts a comment line."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise missing(path)
    text_columns = [c for c, kind in columns.items() if kind == "text"]
    try:
        header = pd.read_csv(path, nrows=0, comment=comment).columns
        # text as written (an item id "NA" stays "NA"); an empty number is missing (NaN)
        frame = pd.read_csv(path, dtype=dict.fromkeys(text_columns, str), keep_default_na=False,
                            na_values={c: [""] for c in header if c not in text_columns}, comment=comment)
    except pd.errors.EmptyDataError:
        raise FileFormatError(str(path), "line 1", f"empty file (no header line; expected columns {', '.join(columns)})") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise FileFormatError(str(path), "file", f"not a CSV table ({str(exc).splitlines()[0]})") from None
    absent = [c for c in columns if c not in frame.columns]
    if absent:
        raise FileFormatError(str(path), "line 1", f"the header lacks column(s) {', '.join(absent)} (it has "
                              f"{', '.join(map(str, frame.columns))})")
    for column, kind in columns.items():
        if kind == "text":
            continue
        numbers = pd.to_numeric(frame[column], errors="coerce")
        bad = numbers.isna() & (frame[column].notna() if kind == "float?" else True)
        bad |= (numbers != numbers.round()) if kind == "int" else False
        if bad.any():
            row = int(bad.to_numpy().argmax())
            raise FileFormatError(str(path), f"line {_line_of(path, row, comment)}", f"column {column} is "
                                  f"{str(frame[column].iloc[row])!r:.40}, not {'an integer' if kind == 'int' else 'a number'}")
        frame[column] = numbers.astype("int64" if kind == "int" else "float64")
    return frame


def _line_of(path: Path, row: int, comment: str | None) -> int:
    """The line of PATH that holds data row ROW (0-based): pandas skips blank lines and lines that are all comment."""
    counted = 0  # the header is the first line that counts
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            if (line.split(comment, 1)[0] if comment else line).strip():
                if counted == row + 1:
                    return number
                counted += 1
    return row + 2
