"""docs/results.md's worked analysis runs: each ```python block, in order and in one namespace, against the committed
reference run, prints exactly the ```text block that follows it."""

from __future__ import annotations

import contextlib
import io
import re

from tests.conftest import REPO

DOC = REPO / "docs" / "results.md"
BLOCK = re.compile(r"```(python|text)\n(.*?)```", re.S)


def doc_blocks() -> list[tuple[str, str]]:
    """(code, the output the doc shows for it), in the doc's order."""
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    pairs = []
    for (kind, code), (next_kind, shown) in zip(blocks, blocks[1:], strict=False):
        if kind == "python":
            assert next_kind == "text", f"docs/results.md: a python block without its output after it:\n{code}"
            pairs.append((code, shown))
    return pairs


def test_the_docs_worked_analysis_prints_what_the_doc_shows(monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    pairs = doc_blocks()
    assert len(pairs) >= 5
    namespace: dict = {}
    for code, shown in pairs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(DOC), "exec"), namespace)  # noqa: S102 - the doc's own code
        assert out.getvalue().rstrip("\n").splitlines() == shown.rstrip("\n").splitlines(), code

