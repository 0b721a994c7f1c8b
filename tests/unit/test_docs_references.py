"""What the docs name exists: every repository path that README.md, config/README.md, docs/*.md and the comments of
config/*.yaml mention (in backticks or as a link) is in the repository or is a file a run makes (git-ignored), and
every dotted ``anyjev.`` name they mention imports and resolves. A renamed module, a moved file or a removed function
then fails here instead of sending a reader to something that is not there."""

from __future__ import annotations

import importlib
import itertools
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCS = [REPO / "README.md", REPO / "config" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
CONFIGS = sorted((REPO / "config").glob("*.yaml"))
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
DOTTED = re.compile(r"(?<![\w./-])anyjev(?:\.[A-Za-z_]\w*)+(?![\w/=-])")
PLACEHOLDER = re.compile(r"[<>*?$|]|\{[^,}]*\}|\.\.\.")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")
# Files the docs tell a reader to make: named before they exist.
MADE_BY_THE_READER = {"config/paper.lock.yaml"}  # docs/cluster.md, "Pin the hub commits"


def top_level() -> set[str]:
    """The repository's top-level entries: a token that starts with one of them and a slash is a repository path."""
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {n.split("/")[0] for n in names if "/" in n}


def expand(token: str) -> list[str]:
    """``summary.{csv,md}`` as ``summary.csv`` and ``summary.md``."""
    parts = BRACES.split(token)
    choices = [p.split(",") if i % 2 else [p] for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def doc_text(path: Path) -> str:
    """What a reader reads: a Markdown file without its fenced blocks, a config file's comments."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return FENCE.sub("", text)
    return "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)


def spans(path: Path) -> list[str]:
    """Where a path may be written: a Markdown file's inline code, a config file's comments (plain text)."""
    text = doc_text(path)
    return INLINE.findall(text) if path.suffix == ".md" else text.splitlines()


def mentioned_paths(path: Path, roots: set[str]) -> list[tuple[str, Path]]:
    """(as written, resolved) for every repository path PATH mentions in backticks or links to."""
    text = doc_text(path)
    found: list[tuple[str, Path]] = []
    for match in LINK.finditer(text):
        target = (match.group(1) or match.group(2)).split("#")[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            found.append((target, (path.parent / target).resolve()))
    for span in spans(path):
        for token in span.split():
            token = re.sub(r"(::|:\d|:line\b|#).*$", "", token.lstrip("'\"(").rstrip("'\",;().:"))
            if "/" not in token or token.split("/")[0] not in roots or "=" in token:
                continue
            for one in expand(token):
                if not PLACEHOLDER.search(one):
                    found.append((one, (REPO / one).resolve()))
    return found


def is_ignored(path: Path) -> bool:
    """A file a run makes (results, logs, environments) and the repository does not hold."""
    try:
        rel = path.relative_to(REPO)
    except ValueError:
        return False
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", str(rel)], cwd=REPO).returncode == 0


def resolves(name: str) -> bool:
    """NAME imports as a module, or as a module and attributes under it."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


@pytest.mark.parametrize("doc", DOCS + CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_doc_mentions_exists(doc: Path) -> None:
    roots = top_level()
    missing = sorted({written for written, path in mentioned_paths(doc, roots)
                      if not path.exists() and not is_ignored(path) and written not in MADE_BY_THE_READER})
    assert not missing, f"{doc.relative_to(REPO)} mentions paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS + CONFIGS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_dotted_anyjev_name_a_doc_mentions_resolves(doc: Path) -> None:
    names = set(DOTTED.findall(doc_text(doc)))
    unresolved = sorted(n for n in names if not resolves(n))
    assert not unresolved, f"{doc.relative_to(REPO)} names what does not exist: {unresolved}"


def test_the_reader_finds_paths_links_and_names() -> None:
    """The extraction itself: a backticked path, a braced alternative, a link and a dotted name are all found."""
    roots = top_level()
    sample = REPO / "docs" / "architecture.md"
    written = {w for w, _ in mentioned_paths(sample, roots)}
    assert "workflow/rules/common.smk" in written and "viewer.md" in written
    assert {"results/tables/summary.csv", "results/tables/summary.md"} <= {
        w for d in DOCS for w, _ in mentioned_paths(d, roots)}
    assert "anyjev.config.validate_config" in set(DOTTED.findall(doc_text(sample)))
    assert not resolves("anyjev.reports.cells.cells_to_wait_for") and resolves("anyjev.rundata.CellLayout")
