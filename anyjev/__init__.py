"""anyjev: score language-model decisions from the next-token log-probabilities of their labels."""

from anyjev.errors import (
    AnyjevError,
    BackendError,
    ConfigError,
    LabelTokenError,
    QuestionError,
    ServerError,
    TaskDataError,
)

__version__ = "0.1.0"

__all__ = [
    "AnyjevError",
    "BackendError",
    "ConfigError",
    "LabelTokenError",
    "Question",
    "QuestionError",
    "ServerError",
    "TaskDataError",
    "__version__",
    "choice",
    "noul",
    "score",
]

# The question API is imported when first used (PEP 562), not with the package: a command that needs none of it (a
# cell's publish-cell step) starts without its schema validator.
_QUESTIONS = ("Question", "choice", "noul", "score")


def __getattr__(name: str):
    if name in _QUESTIONS:
        from anyjev.decision import questions

        return getattr(questions, name)
    raise AttributeError(f"module 'anyjev' has no attribute {name!r}")
