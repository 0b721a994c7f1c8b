"""The workflow's path constants (workflow/rules/common.smk, where paths live), read as the workflow reads them, so
that tests name the workflow's files by its own constants."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

COMMON = REPO / "workflow" / "rules" / "common.smk"
# A path constant: NAME = "literal" or NAME = f"...{EARLIER_CONSTANT}..."
CONSTANT = re.compile(r'^([A-Z_]+) = (f?"[^"\n]*")$', re.M)


def workflow_constants() -> dict[str, str]:
    constants: dict[str, str] = {}
    for name, literal in CONSTANT.findall(COMMON.read_text()):
        constants[name] = evaluate(literal, constants)
    return constants


def evaluate(literal: str, constants: dict[str, str]) -> str:
    """A string literal or an f-string over CONSTANTS (nothing else is evaluated)."""
    node = ast.parse(literal, mode="eval").body
    if isinstance(node, ast.Constant):
        return node.value
    assert isinstance(node, ast.JoinedStr), literal
    parts = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            parts.append(part.value)
        else:
            assert isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name), literal
            parts.append(constants[part.value.id])
    return "".join(parts)
