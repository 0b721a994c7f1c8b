"""Load the published ``anyjev==0.3.0`` package (installed under .assets/anyjev-published) as ``anyjev_published``.

Its modules import each other as ``anyjev.*``, which is our package's name, so it is imported while our
modules are set aside, then re-keyed under the alias; its functions keep the module objects they bound.
Tests skip when the folder is absent, unless ANYJEV_REQUIRE_PUBLISHED=1 (then it is a failure).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[1]
PUBLISHED_DIR = REPO / ".assets" / "anyjev-published"
ALIAS = "anyjev_published"
SKIP_SUBMODULES = ("anyjev.serve", "anyjev.truncate")  # need a server stack / torch at import


def _ours(name: str) -> bool:
    return name == "anyjev" or name.startswith("anyjev.")


def load_published(folder: Path = PUBLISHED_DIR) -> ModuleType:
    """The published package under the name ``anyjev_published`` (imported once per session)."""
    if ALIAS in sys.modules:
        return sys.modules[ALIAS]
    folder_s = str(folder.resolve())
    ours = {k: sys.modules.pop(k) for k in list(sys.modules) if _ours(k)}
    sys.path.insert(0, folder_s)
    importlib.invalidate_caches()
    try:
        pkg = importlib.import_module("anyjev")
        if not str(Path(pkg.__file__).resolve()).startswith(folder_s):
            raise ImportError(f"expected the published anyjev under {folder_s}, imported {pkg.__file__}")
        for m in pkgutil.walk_packages(pkg.__path__, "anyjev."):
            if m.name not in SKIP_SUBMODULES:
                importlib.import_module(m.name)
    finally:
        sys.path.remove(folder_s)
        published = {k: sys.modules.pop(k) for k in list(sys.modules) if _ours(k)}
        sys.modules.update(ours)
        importlib.invalidate_caches()
    for k, mod in published.items():
        sys.modules[ALIAS + k[len("anyjev"):]] = mod
    return sys.modules[ALIAS]


def require_published() -> ModuleType:
    """Load it, or skip (fail under ANYJEV_REQUIRE_PUBLISHED=1) when the install folder is missing."""
    if not PUBLISHED_DIR.is_dir():
        msg = f"the published package is not installed at {PUBLISHED_DIR} (scripts/setup_env.sh)"
        if os.environ.get("ANYJEV_REQUIRE_PUBLISHED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return load_published()
