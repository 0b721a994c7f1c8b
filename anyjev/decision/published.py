"""The published library (PyPI ``anyjev==0.3.0``), imported at run time as ``anyjev_published``.

The ``published`` prompt profile must reproduce that library's prompts token for token without copying
its wording into this repo, so the wording is read from the installed package itself: its
``readout.build_prompt`` / ``DEFAULT_SYSTEM`` and its chat rendering. The package is installed with
``pip install --no-deps --target .assets/anyjev-published anyjev==0.3.0`` (scripts/setup_env.sh).

Its modules import each other absolutely (by the package name ``anyjev``, e.g. its ``question`` module), and that name
is ours too, so a renamed import spec is not enough: while it imports, our ``anyjev*`` modules leave
``sys.modules``, its folder goes first on ``sys.path``, and every published module is imported; then they
are re-keyed as ``anyjev_published*`` and ours are put back. Its functions keep the module objects they
bound at import time, so they keep working. (Its classes still say ``__module__ == "anyjev.xxx"``: do not
pickle them.)
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from anyjev.decision.layouts import Layout
from anyjev.decision.questions import Question
from anyjev.errors import AnyjevError
from anyjev.files import file_sha256

PUBLISHED_VERSION = "0.3.0"
ENV_VAR = "ANYJEV_PUBLISHED_PATH"
DEFAULT_FOLDER = Path(".assets") / "anyjev-published"
ALIAS = "anyjev_published"
SETUP_COMMAND = (
    f"bash scripts/setup_env.sh (it runs `pip install --no-deps --target {DEFAULT_FOLDER} anyjev=={PUBLISHED_VERSION}`), "
    f"or point {ENV_VAR} at such a folder"
)
# CLI entry points of the published package, not needed for prompts (and they parse argv on import paths).
_SKIP_MODULES = ("anyjev.serve", "anyjev.truncate")
THEIR_NAME = "anyjev"  # the published package's own name, which is also ours
_REPO = Path(__file__).resolve().parents[2]
_lock = threading.Lock()


class PublishedPackageError(AnyjevError, ImportError):
    """The published package is missing, or is not the pinned version; names the folder and the fix."""


def published_folder() -> Path:
    """``$ANYJEV_PUBLISHED_PATH`` if set, else ``.assets/anyjev-published`` under the repo root."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser().resolve() if env else (_REPO / DEFAULT_FOLDER).resolve()


def _is_ours(name: str) -> bool:
    return name == "anyjev" or name.startswith("anyjev.")


def load_published(folder: str | Path | None = None) -> ModuleType:
    """Import the published package as ``anyjev_published`` (once per process) and return it.

    Raises :class:`PublishedPackageError` naming the folder and the setup command when it is absent,
    or when the installed version is not the pinned ``0.3.0`` (another version may word prompts
    differently while the scoring identity still says 0.3.0).
    """
    with _lock:
        if ALIAS in sys.modules:
            return sys.modules[ALIAS]
        where = Path(folder).resolve() if folder is not None else published_folder()
        init = where / "anyjev" / "__init__.py"
        if not init.is_file():
            raise PublishedPackageError(
                f"the published anyjev=={PUBLISHED_VERSION} package is not installed in {where} (no {init}); "
                f"the 'published' prompt profile reads its prompts from there. Install it with {SETUP_COMMAND}."
            )
        ours = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_ours(k)}
        sys.path.insert(0, str(where))
        importlib.invalidate_caches()
        try:
            pkg = importlib.import_module(THEIR_NAME)  # theirs: ours left sys.modules above
            if Path(pkg.__file__).resolve() != init.resolve():
                raise PublishedPackageError(f"importing the published package from {where} found {pkg.__file__} instead")
            for info in pkgutil.walk_packages(pkg.__path__, "anyjev."):
                if info.name not in _SKIP_MODULES:
                    importlib.import_module(info.name)
        finally:
            sys.path.remove(str(where))
            theirs = {k: sys.modules.pop(k) for k in list(sys.modules) if _is_ours(k)}
            sys.modules.update(ours)
            importlib.invalidate_caches()
        version = getattr(theirs["anyjev"], "__version__", None)
        if version != PUBLISHED_VERSION:
            raise PublishedPackageError(
                f"{where} holds anyjev {version!r}, not the pinned {PUBLISHED_VERSION}; reinstall with {SETUP_COMMAND}."
            )
        for name, module in theirs.items():
            sys.modules[ALIAS + name[len("anyjev") :]] = module
        return sys.modules[ALIAS]


def module(name: str) -> ModuleType:
    """A published submodule by its own name, e.g. ``module("readout")`` (loads the package first)."""
    load_published()
    return sys.modules[f"{ALIAS}.{name}"]


def readout() -> ModuleType:
    """The published ``readout`` module (prompt builder, chat rendering, label resolution)."""
    return module("readout")


def source_sha256() -> str:
    """SHA-256 of the installed ``readout.py``: recorded in the profile's identity, so an edited
    install cannot pass for the pinned one."""
    return file_sha256(readout().__file__)


def to_published_question(question: Question):
    """Our question as the published ``Question``. Score questions keep our level strings; the published
    builder words them as bins over ``scale`` when ``centers`` is None, else as ordered levels (its
    ``Question.score(levels=...)`` sets ``centers = 0..K-1`` and ``scale = (0, K-1)``)."""
    published_question = module("question").Question
    if question.kind == "choice":
        return published_question.choice(question.text, list(question.options))
    if question.kind == "noul":
        return published_question.noul(question.text)
    k = question.k
    centers = question.centers
    if centers is None and question.scale is None:
        centers = tuple(float(i) for i in range(k))
    scale = question.scale if question.scale is not None else (0.0, float(k - 1))
    return published_question("score", question.text, tuple(question.options), None, tuple(scale), True, centers)


def perm_of(question: Question, layout: Layout) -> list[int]:
    """The published permutation for our layout: ``perm[j]`` = option shown at position j; for a
    Yes/No question the swapped phrasing is the published ``[1, 0]``."""
    if question.kind == "noul":
        return [1, 0] if layout.swapped else [0, 1]
    return list(layout.order)


def render_text(tokenizer, question: Question, state: str, layout: Layout, labels: Sequence[str]) -> str:
    """The text the published Decider renders for this (state, question, layout): its ``build_prompt``
    with its ``DEFAULT_SYSTEM``, through its ``render_chat_parts`` (prefix + suffix, as it sends them)."""
    ro = readout()
    spec = ro.build_prompt(module("state").render_state(state), to_published_question(question), perm_of(question, layout),
                           ro.DEFAULT_SYSTEM, list(labels))
    prefix, suffix = ro.render_chat_parts(tokenizer, spec)
    return prefix + suffix


def resolve_labels(tokenizer, question: Question) -> tuple[list[str], list[int]]:
    """The published label strings and ids (isolation encoding, digits falling back to letters for score)."""
    labels, ids = readout().resolve_labels(tokenizer, to_published_question(question))
    return list(labels), [int(i) for i in ids]


def system_prompt() -> str:
    """The published system message, read from the package."""
    return str(readout().DEFAULT_SYSTEM)
