"""Tasks: labelled items, the generic JSONL task file, and the seeded test / calibration split.

A task is a list of items (a state, a typed question about it and the gold option) plus how the batch
label prior is grouped and where the data came from. Every task, whether built in, fetched from the
hub or written by a user, can be stored in one plain file format so that what was scored is always
inspectable and re-loadable.

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

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from anyjev.decision.questions import KINDS, NOUL_OPTIONS, Question, choice, noul, score
from anyjev.errors import QuestionError, TaskDataError
from anyjev.files import write_text_atomic

SPLITS = ("test", "calib")
PRIOR_GROUPS = ("question", "task")
FORMAT = "anyjev-jsonl"
ITEM_KEYS = frozenset({"id", "state", "question", "kind", "options", "gold", "split", "scale", "centers", "name"})
HEADER_KEYS = frozenset({"task", "prior_group", "origin"})
# Every character str.splitlines() breaks on: inside an option it would start a fake prompt line.
LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_LINE_BREAK = re.compile("[" + re.escape(LINE_BREAKS) + "]")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Item:
    """One labelled decision: the state shown to the model, the question, the gold option index."""

    id: str
    state: str
    question: Question
    gold: int
    split: str | None = None


@dataclass
class Task:
    """A named list of items (one K, or mixed K), with its prior grouping and provenance."""

    name: str
    items: list[Item]
    prior_group: str = "question"
    source: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def _where(self) -> str:
        return str(self.source.get("path") or f"<task {self.name}>")

    def validate(self) -> None:
        """Check the invariants later stages rely on; raise TaskDataError naming the item id."""
        where = self._where()
        if not isinstance(self.name, str) or not self.name:
            raise TaskDataError(where, "task", f"task name must be a non-empty string, got {self.name!r}")
        if self.prior_group not in PRIOR_GROUPS:
            raise TaskDataError(where, "task", f"prior_group {self.prior_group!r} must be one of {PRIOR_GROUPS}")
        if not self.items:
            raise TaskDataError(where, "task", f"task {self.name!r} has no items")
        seen: set[str] = set()
        for it in self.items:
            if not isinstance(it, Item):
                raise TaskDataError(where, "task", f"items must be Item, got {type(it).__name__}")
            if it.id in seen:
                raise TaskDataError(where, f"item {it.id}", "duplicate item id")
            seen.add(it.id)
            if not isinstance(it.state, str):
                raise TaskDataError(where, f"item {it.id}", f"state must be a string, got {type(it.state).__name__}")
            problem = _surrogate_problem(_item_strings(it)) or _option_line_break(it.question.options)
            if problem:
                raise TaskDataError(where, f"item {ascii(it.id)}", problem)
            if isinstance(it.gold, bool) or not isinstance(it.gold, int) or not 0 <= it.gold < it.question.k:
                raise TaskDataError(where, f"item {it.id}", f"gold {it.gold!r} is not an option index 0..{it.question.k - 1}")
            if it.split is not None and it.split not in SPLITS:
                raise TaskDataError(where, f"item {it.id}", f"split {it.split!r} must be one of {SPLITS} or None")

    @property
    def k_range(self) -> tuple[int, int]:
        """Smallest and largest number of options over the items (equal unless K is mixed)."""
        ks = [it.question.k for it in self.items]
        return min(ks), max(ks)

    @property
    def k(self) -> int | str:
        """The number of options K, or ``"mixed (lo-hi)"`` when items differ (evaluation groups them by K)."""
        lo, hi = self.k_range
        return lo if lo == hi else f"mixed ({lo}-{hi})"

    def prior_groups(self) -> list[str]:
        """Per item, the key the batch label prior is pooled over (question key, or the task name)."""
        if self.prior_group == "task":
            return [self.name] * len(self.items)
        return [it.question.key() for it in self.items]


# ---------------------------------------------------------------------------------------------------
# strings a prompt or a UTF-8 file cannot hold


def _json_strings(value: object, field: str = "") -> Iterator[tuple[str, str]]:
    """(what, string) for every string in a parsed JSON value, object keys included; ``what`` names
    the field as a user finds it (``field 'options[1]'``, ``key '...' of 'origin'``)."""
    if isinstance(value, str):
        yield f"field {field!r}", value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield f"key {ascii(k)}" + (f" of {field!r}" if field else ""), k
            yield from _json_strings(v, f"{field}.{k}" if field else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _json_strings(v, f"{field}[{i}]")


def _item_strings(item: Item) -> Iterator[tuple[str, str]]:
    q = item.question
    yield "field 'id'", item.id
    yield "field 'state'", item.state
    yield "field 'question'", q.text
    for i, o in enumerate(q.options):
        yield f"field 'options[{i}]'", o
    if q.name is not None:
        yield "field 'name'", q.name


def _surrogate_problem(strings: Iterator[tuple[str, str]]) -> str | None:
    """Why the first string holding a lone surrogate cannot be used (it cannot be encoded as UTF-8)."""
    for what, text in strings:
        m = _SURROGATE.search(text)
        if m:
            return (
                f"{what} holds a lone UTF-16 surrogate {ascii(m.group())} at character {m.start()} "
                f"(around {ascii(text[max(0, m.start() - 20) : m.start() + 20])}): it is half of a surrogate pair, "
                "not a character, and cannot be written as UTF-8. Write the character itself, or both halves "
                "of its pair (in JSON, e.g. \\ud83d\\ude00 for U+1F600)"
            )
    return None


def _option_line_break(options: Sequence[str]) -> str | None:
    """Why an option holding a line break cannot be shown: each option is one prompt line."""
    for i, o in enumerate(options):
        m = _LINE_BREAK.search(o)
        if m:
            return (
                f"field 'options[{i}]' = {ascii(o)} holds a line break ({ascii(m.group())}): each option is shown on "
                "its own prompt line, so the rest would read as another line of the prompt (a fake option). "
                "Put each option on one line (replace the line break with a space)"
            )
    return None


# ---------------------------------------------------------------------------------------------------
# reading


def _is_header(obj: object) -> bool:
    return isinstance(obj, dict) and "task" in obj and "question" not in obj


def _parse_header(obj: dict, path: str, where: str) -> dict:
    problem = _surrogate_problem(_json_strings(obj))
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
    problem = _surrogate_problem(_json_strings(obj))
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
    problem = _option_line_break(q.options)
    if problem:
        raise TaskDataError(path, where, f"item {item_id!r}: {problem}")
    gold = _gold_index(obj["gold"], q.options, path, where, item_id)
    return Item(id=item_id, state=obj["state"], question=q, gold=gold, split=split)


def jsonl_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a bad line raises naming its number."""
    rows = []
    with open(path, "rb") as f:
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
    # A task loaded from a file carries that file's path/sha as source: its own provenance is "origin".
    origin = task.source.get("origin") if task.source.get("format") == FORMAT else task.source
    if origin:
        header["origin"] = origin
    problem = _surrogate_problem(_json_strings(header))
    if problem:
        raise TaskDataError(task._where(), "header", problem)
    lines = [json.dumps(header, ensure_ascii=False)]
    lines += [json.dumps(item_to_dict(it), ensure_ascii=False) for it in task.items]
    write_text_atomic(p, "\n".join(lines) + "\n")
    return p


# ---------------------------------------------------------------------------------------------------
# splitting


def split_items(
    items: Sequence[Item],
    n_test: int,
    n_calib: int,
    seed: int = 0,
    *,
    allow_fewer: bool = False,
    label: str = "<items>",
) -> list[Item]:
    """Deterministic test / calibration split, so every model is scored on the same items.

    Procedure: ``perm = numpy.random.default_rng(seed).permutation(len(items))``; the items are visited in
    the order ``items[perm[0]], items[perm[1]], ...``.

    * No item carries a split: the first ``n_test`` visited items become ``"test"``, the next ``n_calib``
      ``"calib"``; the rest are dropped. With fewer than ``n_test + n_calib`` items a TaskDataError is
      raised, unless ``allow_fewer``: then all n items are used, keeping the test:calib proportion,
      ``n_test' = n * n_test // (n_test + n_calib)`` and ``n_calib' = n - n_test'`` (each must stay >= 1
      where the request was >= 1).
    * Every item carries a split (given in the file): the assignment is kept; the first ``n_test``
      visited "test" items and the first ``n_calib`` visited "calib" items are returned. A group with
      fewer items than requested raises, unless ``allow_fewer`` (then the whole group is kept).
    * Some items carry a split and others do not: TaskDataError (ambiguous; naming the first such item).

    Returns the test items first, then the calibration items, each in visiting order. ``label`` names the
    item source in error messages.
    """
    if n_test < 0 or n_calib < 0:
        raise ValueError(f"n_test and n_calib must be >= 0, got {n_test}, {n_calib}")
    items = list(items)
    n = len(items)
    perm = np.random.default_rng(seed).permutation(n)
    visited = [items[int(i)] for i in perm]
    given = [it.split is not None for it in items]
    if any(given):
        if not all(given):
            bad = next(it for it in items if it.split is None)
            raise TaskDataError(
                label, f"item {bad.id}", "some items carry a split and this one does not: give every item a split or none"
            )
        out: list[Item] = []
        for split, want in (("test", n_test), ("calib", n_calib)):
            group = [it for it in visited if it.split == split]
            if len(group) < want and not allow_fewer:
                raise TaskDataError(
                    label, "split", f"only {len(group)} items are marked {split!r} but {want} were requested"
                )
            out += group[:want]
        return out
    want = n_test + n_calib
    if n < want:
        if not allow_fewer:
            raise TaskDataError(
                label, "split", f"{n} items, fewer than n_test + n_calib = {n_test} + {n_calib} (allow_fewer keeps the proportion)"
            )
        t = n * n_test // want
        c = n - t
        if (n_test > 0 and t == 0) or (n_calib > 0 and c == 0):
            raise TaskDataError(label, "split", f"{n} items are too few for a test and a calibration split")
        n_test, n_calib = t, c
    test = [dataclasses.replace(it, split="test") for it in visited[:n_test]]
    calib = [dataclasses.replace(it, split="calib") for it in visited[n_test : n_test + n_calib]]
    return test + calib
