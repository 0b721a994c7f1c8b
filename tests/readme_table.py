"""README.md's results table: the text between its markers, which the tests keep equal to the generated table."""

from __future__ import annotations

README_START, README_END = "<!-- summary:start -->", "<!-- summary:end -->"


def readme_block(text: str) -> str | None:
    """The text between the README's summary markers (stripped), or None when the markers are absent."""
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return None
    return text[start + len(README_START) : end].strip("\n")
