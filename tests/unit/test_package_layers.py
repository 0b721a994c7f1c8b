"""The package's layers as docs/architecture.md lists them ("Layers"): every import of every module under anyjev/ (at
module level, inside functions and under TYPE_CHECKING alike) runs to its own layer or one below, no two modules import
each other in a circle, and the run's files are read by a package that stands below the steps that write them: nothing
in anyjev/run/ imports anyjev/reports/, and anyjev/rundata/ imports nothing from either."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "anyjev"
ARCHITECTURE = REPO / "docs" / "architecture.md"


def layers() -> dict[str, int]:
    """Each top-level module or folder of the package (``files``, ``run``, ``__init__``) with the number of its layer,
    as the numbered list under architecture.md's "Layers" heading gives them."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n### Layers\n", 1)[1].split("\n#", 1)[0]
    found: dict[str, int] = {}
    for number, names in re.findall(r"^(\d+)\. (.*)$", section, re.M):
        for name in re.findall(r"`([\w.]+/?)`", names.split(":")[0]):
            found[name.removesuffix("/").removesuffix(".py")] = int(number)
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """The anyjev modules PATH imports, anywhere in it (relative imports resolved)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*head, base] if base else head)
            # `from anyjev.x import y`: y is a module of x or a name in it; either way x is imported
            names |= {base} | {f"{base}.{a.name}" for a in node.names}
    return {n for n in names if n == "anyjev" or n.startswith("anyjev.")}


def unit(module: str) -> str:
    """The top-level module or folder a module belongs to: ``anyjev.run.store`` -> ``run``; ``anyjev`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
IMPORTS = {name: {m for m in imported(path) if m in MODULES} for name, path in MODULES.items()}


def test_every_part_of_the_package_has_one_layer_in_the_architecture() -> None:
    listed = layers()
    parts = {unit(name) for name in MODULES}
    assert parts - set(listed) == set(), f"not in architecture.md's layers: {sorted(parts - set(listed))}"
    assert set(listed) - parts == set(), f"architecture.md's layers name what the package lacks: {sorted(set(listed) - parts)}"


def test_no_module_imports_one_above_its_layer() -> None:
    listed = layers()
    upward = [f"{name} (layer {listed[unit(name)]}) imports {other} (layer {listed[unit(other)]})"
              for name, others in IMPORTS.items() for other in sorted(others)
              if listed.get(unit(other), 0) > listed.get(unit(name), 0)]
    assert upward == []


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    """Modules, not packages: a package's face (its __init__) that hands on a module's names is not a circle of
    that module's."""
    state: dict[str, int] = {}  # 1: on the path being walked, 2: done
    circles: list[list[str]] = []

    def walk(name: str, path: list[str]) -> None:
        state[name] = 1
        for other in sorted(IMPORTS[name]):
            if other == name or (MODULES[other].name == "__init__.py" and name.startswith(other + ".")):
                continue  # a module's own package: imported before the module, not by it
            if state.get(other) == 1:
                circles.append([*path[path.index(other):], other])
            elif other not in state:
                walk(other, [*path, other])
        state[name] = 2

    for name in MODULES:
        if name not in state:
            walk(name, [name])
    assert circles == [], [" -> ".join(c) for c in circles]


def test_the_run_reader_stands_below_the_steps_and_the_reports_above_them() -> None:
    run_imports_reports = sorted(f"{n} -> {o}" for n, others in IMPORTS.items() if unit(n) == "run"
                                 for o in others if unit(o) == "reports")
    reader_imports_run = sorted(f"{n} -> {o}" for n, others in IMPORTS.items() if unit(n) == "rundata"
                                for o in others if unit(o) in ("run", "reports"))
    assert run_imports_reports == [] and reader_imports_run == []
