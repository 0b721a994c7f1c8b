"""The published ``anyjev==0.3.0`` package for tests: loaded by the library's own loader
(:mod:`anyjev.decision.published`) as ``anyjev_published``. Tests skip when it is not installed, unless
ANYJEV_REQUIRE_PUBLISHED=1 (then it is a failure)."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from anyjev.decision.published import load_published, published_folder


def require_published() -> ModuleType:
    """Load it, or skip (fail under ANYJEV_REQUIRE_PUBLISHED=1) when the install folder is missing."""
    folder = published_folder()
    if not (folder / "anyjev" / "__init__.py").is_file():
        msg = f"the published package is not installed at {folder} (scripts/setup_env.sh)"
        if os.environ.get("ANYJEV_REQUIRE_PUBLISHED") == "1":
            pytest.fail(msg)
        pytest.skip(msg)
    return load_published()
