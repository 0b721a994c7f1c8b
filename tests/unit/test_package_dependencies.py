"""The package declares what it imports: every third-party module imported at module level under anyjev/ is a
declared dependency in pyproject.toml, and every declared dependency is imported somewhere."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

DISTRIBUTION = {"yaml": "pyyaml", "huggingface_hub": "huggingface-hub"}  # module -> distribution name
# Core dependencies imported where they are used, not at module level: matplotlib when a figure is drawn
# (anyjev/reports/plots.py, pyplot()), so that every `snakemake` call's parse does not load it.
IMPORTED_WHERE_USED = {"matplotlib": REPO / "anyjev" / "reports" / "draw.py"}


def module_level_imports(path: Path) -> set[str]:
    """Top-level package names imported outside functions (imports inside functions are optional extras)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_declared_dependencies_are_what_the_package_imports() -> None:
    imported = set().union(*(module_level_imports(p) for p in (REPO / "anyjev").rglob("*.py")))
    third_party = {DISTRIBUTION.get(m, m) for m in imported - set(sys.stdlib_module_names) - {"anyjev", "__future__"}}
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {d.split("[")[0].split("=")[0].split(">")[0].strip().lower() for d in project["dependencies"]}
    assert third_party | set(IMPORTED_WHERE_USED) == declared, f"imported {sorted(third_party)}, declared {sorted(declared)}"
    for module, path in IMPORTED_WHERE_USED.items():
        inside = {a.name.split(".")[0] for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Import) for a in node.names}
        assert module in inside and module not in module_level_imports(path), f"{path}: where is {module} imported?"
    lazy = set().union(*(set(v) for v in project["optional-dependencies"].values()))
    assert {"torch", "transformers", "datasets", "huggingface-hub"} <= lazy
