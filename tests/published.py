"""The published ``anyjev==0.3.0`` package for tests: loaded by the library's own loader
(:mod:`anyjev.decision.published`) as ``anyjev_published``. Tests skip when it is not installed, unless
ANYJEV_REQUIRE_PUBLISHED=1 (then it is a failure)."""

from __future__ import annotations

from types import ModuleType

from anyjev.decision.published import load_published, published_folder
from tests.conftest import require


def require_published() -> ModuleType:
    """Load it, or skip (fail under ANYJEV_REQUIRE_PUBLISHED=1) when the install folder is missing."""
    folder = published_folder()
    require("published", (folder / "anyjev" / "__init__.py").is_file(),
            f"the published package is not installed at {folder} (scripts/setup_env.sh)")
    return load_published()
