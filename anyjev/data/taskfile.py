"""The JSONL task file: every task, built in, fetched from the hub or written by a user, is stored in this format,
so what was scored is always inspectable and re-loadable.

JSONL task format
-----------------
UTF-8 text, one JSON object per line; blank lines are ignored. Line numbers in error messages count
every physical line from 1. No string, key or value, may hold a lone UTF-16 surrogate (a JSON escape
such as ``"\\ud800"`` without its other half): it is not a character and cannot be written as UTF-8.

Optional header (first non-blank line only). A line is the header when it is a JSON object that has a
``"task"`` key and no ``"question"`` key::

    {"task": "my_task", "prior_group": "question", "origin": {...}}

* ``task``: the task name (non-empty string). ``load_task_file(path, name=...)`` overrides it; without
  either the file name without its extension is the task name.
* ``prior_group``: ``"question"`` (default: the batch label prior is computed per question key) or
  ``"task"`` (one prior across the whole task; use it when every item carries its own question and
  options, as in MMLU).
* ``origin``: optional JSON object, free-form provenance of the data (kept in ``Task.source["origin"]``).

Item lines::

    {"id": "q17", "state": "The text the decision is about", "question": "Is it spam?", "kind": "noul",
     "gold": "Yes", "split": "test"}
    {"id": "q18", "state": "", "question": "Capital of France?", "kind": "choice",
     "options": ["Paris", "Lyon", "Nice"], "gold": 0}
    {"id": "q19", "state": "...", "question": "How severe?", "kind": "score",
     "options": ["low", "medium", "high"], "scale": [0, 10], "gold": "high"}

* ``id`` (required): a non-empty string (an integer is accepted and read as its decimal string);
  unique within the file.
* ``state`` (required): a string, possibly empty (an empty state is shown to the model as ``(empty)``).
* ``question`` (required): the question text, a non-empty string.
* ``kind``: ``"choice"`` (default), ``"noul"`` (Yes/No) or ``"score"`` (ordered levels).
* ``options``: required for choice (2–26 distinct non-empty strings) and score (2–10 levels); not
  allowed for noul, whose options are always ``["Yes", "No"]`` (option 0 = Yes) — a noul line may
  repeat exactly ``["Yes", "No"]``. Each option is shown on its own prompt line, so an option may not
  hold a line break (``\n``, ``\r``, ``\v``, ``\f``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028``,
  ``\u2029``: every character :meth:`str.splitlines` breaks on). The state and the question text are
  free text and may span several lines (7 of the 200 built-in MMLU questions do).
* ``gold`` (required): the option text (exact, or equal after stripping spaces) or its 0-based index
  (an integer; negative indices are refused).
* ``split``: optional, ``"test"``, ``"calib"`` or ``null``.
* score only: optional ``"scale": [lo, hi]`` (lo < hi) and ``"centers"`` (one number per level).
* ``name``: optional display name of the question (not part of its identity key).

Any other key is refused (it is most often a typo, e.g. ``"optoins"``). Every problem raises
:class:`~anyjev.errors.TaskDataError` naming the file and the line. Items may have different numbers of
options K (e.g. answer lists of 2-5 options): ``Task.k`` is then the string ``"mixed (2-5)"`` and
``Task.k_range`` gives (min, max); evaluation pools the batch prior per prior group *and* K and pads the
option axis. :func:`write_task_file` writes this format (header first, gold as option
text) and a written file loads back to an equal task; writing a loaded task again gives the same bytes.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

from anyjev.data.tasks import PRIOR_GROUPS, SPLITS, Item, Task, json_strings, option_line_break, surrogate_problem
from anyjev.decision.questions import KINDS, NOUL_OPTIONS, choice, noul, score
from anyjev.errors import QuestionError, TaskDataError
from anyjev.files import write_text_atomic

FORMAT = "anyjev-jsonl"
ITEM_KEYS = frozenset({"id", "state", "question", "kind", "options", "gold", "split", "scale", "centers", "name"})
HEADER_KEYS = frozenset({"task", "prior_group", "origin"})


# ---------------------------------------------------------------------------------------------------
# reading


def _is_header(obj: object) -> bool:
    return isinstance(obj, dict) and "task" in obj and "question" not in obj


def _parse_header(obj: dict, path: str, where: str) -> dict:
    problem = surrogate_problem(json_strings(obj))
    if problem:
        raise TaskDataError(path, where, f"header: {problem}")
    unknown = sorted(set(obj) - HEADER_KEYS)
    if unknown:
        raise TaskDataError(path, where, f"unknown header key(s) {unknown}; allowed: {sorted(HEADER_KEYS)}")
    if not isinstance(obj["task"], str) or not obj["task"].strip():
        raise TaskDataError(path, where, f"header 'task' must be a non-empty string, got {obj['task']!r}")
    pg = obj.get("prior_group", "question")
    if pg not in PRIOR_GROUPS:
        raise TaskDataError(path, where, f"header 'prior_group' = {pg!r} must be one of {PRIOR_GROUPS}")
    if "origin" in obj and not isinstance(obj["origin"], dict):
        raise TaskDataError(path, where, "header 'origin' must be a JSON object")
    return obj


def _gold_index(gold: object, options: Sequence[str], path: str, where: str, item_id: str) -> int:
    if isinstance(gold, bool):
        raise TaskDataError(path, where, f"item {item_id!r}: field 'gold' must be an option text or index, not a bool")
    if isinstance(gold, int):
        if not 0 <= gold < len(options):
            raise TaskDataError(
                path, where, f"item {item_id!r}: field 'gold' index {gold} out of range 0..{len(options) - 1}"
            )
        return gold
    if isinstance(gold, str):
        if gold in options:
            return list(options).index(gold)
        stripped = [o.strip() for o in options]
        if gold.strip() in stripped:
            return stripped.index(gold.strip())
        raise TaskDataError(path, where, f"item {item_id!r}: field 'gold' = {gold!r} is not among options {list(options)}")
    raise TaskDataError(path, where, f"item {item_id!r}: field 'gold' must be an option text or 0-based index, got {gold!r}")


def _parse_item(obj: object, path: str, where: str) -> Item:
    if not isinstance(obj, dict):
        raise TaskDataError(path, where, f"expected a JSON object, got {type(obj).__name__}")
    problem = surrogate_problem(json_strings(obj))
    if problem:
        rid = obj.get("id")
        named = isinstance(rid, str | int) and not isinstance(rid, bool)
        raise TaskDataError(path, where, (f"item {ascii(str(rid))}: " if named else "") + problem)
    unknown = sorted(set(obj) - ITEM_KEYS)
    if unknown:
        raise TaskDataError(path, where, f"unknown key(s) {unknown}; allowed: {sorted(ITEM_KEYS)}")
    if "id" not in obj:
        raise TaskDataError(path, where, "missing field 'id'")
    raw_id = obj["id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or (isinstance(raw_id, str) and not raw_id.strip()):
        raise TaskDataError(path, where, f"field 'id' must be a non-empty string, got {raw_id!r}")
    item_id = str(raw_id)
    if "state" not in obj:
        raise TaskDataError(path, where, f"item {item_id!r}: missing field 'state' (use \"\" for no state)")
    if not isinstance(obj["state"], str):
        raise TaskDataError(path, where, f"item {item_id!r}: field 'state' must be a string, got {obj['state']!r}")
    if "question" not in obj:
        raise TaskDataError(path, where, f"item {item_id!r}: missing field 'question'")
    if "gold" not in obj:
        raise TaskDataError(path, where, f"item {item_id!r}: missing field 'gold'")
    kind = obj.get("kind", "choice")
    if kind not in KINDS:
        raise TaskDataError(path, where, f"item {item_id!r}: field 'kind' = {kind!r} must be one of {KINDS}")
    split = obj.get("split")
    if split is not None and split not in SPLITS:
        raise TaskDataError(path, where, f"item {item_id!r}: field 'split' = {split!r} must be one of {SPLITS} or null")
    name = obj.get("name")
    if name is not None and not isinstance(name, str):
        raise TaskDataError(path, where, f"item {item_id!r}: field 'name' must be a string")
    if kind != "score" and ("scale" in obj or "centers" in obj):
        raise TaskDataError(path, where, f"item {item_id!r}: fields 'scale'/'centers' are only for kind 'score'")
    text = obj["question"]
    try:
        if kind == "noul":
            if "options" in obj and obj["options"] != list(NOUL_OPTIONS):
                raise QuestionError("options", obj["options"], "a noul question has no options (fixed to Yes, No)")
            q = noul(text, name=name)
        else:
            if "options" not in obj:
                raise QuestionError("options", None, f"missing: a {kind} question needs a list of options")
            options = obj["options"]
            if not isinstance(options, list):
                raise QuestionError("options", options, "must be a JSON list of strings")
            if kind == "choice":
                q = choice(text, options, name=name)
            else:
                scale, centers = obj.get("scale"), obj.get("centers")
                for fname, val in (("scale", scale), ("centers", centers)):
                    if val is not None and (
                        not isinstance(val, list) or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in val)
                    ):
                        raise QuestionError(fname, val, "must be a JSON list of numbers")
                q = score(text, options, scale=scale, centers=centers, name=name)
    except QuestionError as e:
        raise TaskDataError(path, where, f"item {item_id!r}: field {e.field!r}: {e}") from e
    problem = option_line_break(q.options)
    if problem:
        raise TaskDataError(path, where, f"item {item_id!r}: {problem}")
    gold = _gold_index(obj["gold"], q.options, path, where, item_id)
    return Item(id=item_id, state=obj["state"], question=q, gold=gold, split=split)


# Byte order marks of the encodings an editor may save instead of UTF-8 (UTF-32's first, as they begin like UTF-16's).
BOMS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32", codecs.BOM_UTF16_LE: "UTF-16",
        codecs.BOM_UTF16_BE: "UTF-16"}


def check_utf8(path: str | os.PathLike, head: bytes) -> None:
    """Refuse a file saved as UTF-16 or UTF-32, saying so (HEAD: its first bytes): a byte order mark, or, without one,
    the zero bytes that UTF-16 puts beside every ASCII character."""
    bom, encoding = next(((bom, name) for bom, name in BOMS.items() if head.startswith(bom)), (b"", None))
    what = f"{encoding} (it begins with the byte order mark {bom.hex(' ').upper()})"
    if encoding is None and len(head) >= 2 and head.count(0) * 3 >= len(head):
        encoding = "UTF-16BE" if head[0] == 0 else "UTF-16LE"
        what = f"{encoding} (a zero byte beside every character, no byte order mark)"
    if encoding:
        raise TaskDataError(str(path), "line 1", f"the file is {what}, not UTF-8: save it as UTF-8 (e.g. "
                            f"`iconv -f {encoding} -t UTF-8 {Path(path).name} > fixed.jsonl`)")


def jsonl_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a bad line raises naming its number."""
    rows = []
    with open(path, "rb") as f:
        check_utf8(path, f.read(64))
        f.seek(0)
        for n, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise TaskDataError(str(path), f"line {n}", "not valid UTF-8") from e
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(str(path), f"line {n}", f"not valid JSON ({e.msg})") from e
            if not isinstance(obj, dict):
                raise TaskDataError(str(path), f"line {n}", "expected a JSON object")
            rows.append((n, obj))
    return rows


def item_splits(path: str | os.PathLike) -> tuple[dict, dict[str, str | None]]:
    """A task file's header (empty without one) and each item's split by id, in file order, read without building
    the items' questions: what a cell's scores are checked against before they are evaluated."""
    p = Path(path)
    if not p.is_file():
        raise TaskDataError(str(p), "file", "task file not found")
    rows = jsonl_rows(p)
    header = rows[0][1] if rows and _is_header(rows[0][1]) else {}
    return header, {str(obj.get("id")): obj.get("split") for _, obj in rows[1 if header else 0:]}


def find_item_line(path: str | os.PathLike, item_id: str) -> int | None:
    """The line of ``path`` that holds item ``item_id`` (None when there is none or the file cannot be
    read): for messages about an item found wrong after loading."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    for n, raw in enumerate(data.split(b"\n"), start=1):
        try:
            obj = json.loads(raw.removeprefix(b"\xef\xbb\xbf"))
        except ValueError:
            continue
        rid = obj.get("id") if isinstance(obj, dict) else None
        if isinstance(rid, str | int) and not isinstance(rid, bool) and str(rid) == item_id:
            return n
    return None


def load_task_file(path: str | os.PathLike, name: str | None = None) -> Task:
    """Read and validate a JSONL task file (format in the module docstring), failing on the first problem."""
    p = Path(path)
    ps = str(p)
    if not p.exists():
        raise TaskDataError(ps, "file", f"task file not found (looked in {p.resolve()})")
    if not p.is_file():
        raise TaskDataError(ps, "file", "not a regular file")
    data = p.read_bytes()
    check_utf8(ps, data[:64])
    header: dict | None = None
    items: list[Item] = []
    first_line: dict[str, int] = {}
    seen_content = False
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    for n, raw in enumerate(lines, start=1):
        where = f"line {n}"
        if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TaskDataError(ps, where, f"not valid UTF-8 (byte {e.start}: {raw[e.start:e.start + 1]!r})") from e
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskDataError(ps, where, f"not valid JSON ({e.msg}: column {e.colno})") from e
        if not seen_content and _is_header(obj):
            header = _parse_header(obj, ps, where)
            seen_content = True
            continue
        seen_content = True
        if _is_header(obj):
            raise TaskDataError(ps, where, "a header object ('task' key) is only allowed on the first line")
        item = _parse_item(obj, ps, where)
        if item.id in first_line:
            raise TaskDataError(ps, where, f"duplicate item id {item.id!r} (first on line {first_line[item.id]})")
        first_line[item.id] = n
        items.append(item)
    if not items:
        raise TaskDataError(ps, "file", "the task has no items")
    task_name = name or (header["task"] if header else p.stem)
    source: dict = {"format": FORMAT, "path": ps, "sha256": hashlib.sha256(data).hexdigest()}
    if header and "origin" in header:
        source["origin"] = header["origin"]
    return Task(
        name=task_name,
        items=items,
        prior_group=header.get("prior_group", "question") if header else "question",
        source=source,
    )


# ---------------------------------------------------------------------------------------------------
# writing


def written_origin(source: dict) -> dict:
    """What a written task file records as its ``origin``: a task read from a task file records that file (as the
    config named it, and its hash) with the file's own origin and the split; any other task its source."""
    if source.get("format") != FORMAT:
        return source
    rest = {k: v for k, v in source.items() if k not in ("format", "path", "sha256", "file")}
    return {"file": source.get("file", source["path"]), "sha256": source["sha256"]} | rest


def user_file_line(origin: dict | None, item_id: str) -> tuple[str, int] | None:
    """(file, line) of item ITEM_ID in the task file a prepared file was written from (its ``origin``), when that
    file is still as it was prepared (same hash): where a user edits the item. None otherwise."""
    path, sha = (origin or {}).get("file"), (origin or {}).get("sha256")
    if not isinstance(path, str) or not isinstance(sha, str):
        return None
    try:
        if hashlib.sha256(Path(path).read_bytes()).hexdigest() != sha:
            return None
    except OSError:
        return None
    line = find_item_line(path, item_id)
    return None if line is None else (path, line)


def item_to_dict(item: Item) -> dict:
    """One item as its JSONL object (gold written as the option text: readable and order-independent)."""
    q = item.question
    d: dict = {"id": item.id, "state": item.state, "question": q.text, "kind": q.kind}
    if q.kind != "noul":
        d["options"] = list(q.options)
    d["gold"] = q.options[item.gold]
    if q.scale is not None:
        d["scale"] = list(q.scale)
    if q.centers is not None:
        d["centers"] = list(q.centers)
    if q.name is not None:
        d["name"] = q.name
    if item.split is not None:
        d["split"] = item.split
    return d


def write_task_file(task: Task, path: str | os.PathLike) -> Path:
    """Write a task as JSONL atomically (temp file + os.replace) so a crash never leaves half a file."""
    task.validate()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    header: dict = {"task": task.name, "prior_group": task.prior_group}
    origin = written_origin(task.source)
    if origin:
        header["origin"] = origin
    problem = surrogate_problem(json_strings(header))
    if problem:
        raise TaskDataError(task._where(), "header", problem)
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(item_to_dict(it), ensure_ascii=False) for it in task.items]
    write_text_atomic(p, "\n".join(lines) + "\n")
    return p
