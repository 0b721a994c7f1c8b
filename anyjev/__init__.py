"""anyjev: score language-model decisions from the next-token log-probabilities of their labels."""

from anyjev.decision.questions import Question, choice, noul, score
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
