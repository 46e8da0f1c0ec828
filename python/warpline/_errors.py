"""The exceptions warpline raises: :class:`PipelineError` (the pipeline does
not compile: every problem at once, each with its key path) and
:class:`RunError` (a run could not start or finish)."""

from __future__ import annotations

import json
from typing import List, NamedTuple, Optional


class Problem(NamedTuple):
    """One thing wrong with a pipeline, at a key path such as
    ``stages.decode.workers``."""

    path: str
    """Where in the pipeline (dotted key path; ``<file>`` for the whole)."""
    message: str
    """What is wrong and, where it helps, what would be right."""
    tier: str = "schema"
    """Which check found it: ``schema`` (the file's shape), ``graph`` (how
    its parts connect) or ``environment`` (this machine)."""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class WarplineError(Exception):
    """The base of every exception warpline raises."""


class PipelineError(WarplineError, ValueError):
    """The pipeline does not compile. ``problems`` holds every problem found
    (not only the first), each with its key path; ``str(error)`` is what
    ``warpline validate`` prints."""

    problems: List[Problem]
    """Every problem, in the order found."""
    not_checked: List[str]
    """Checks not made because they depend on something that did not
    compile."""
    origin: str
    """The file, or ``<string>`` for TOML text and dicts."""

    def __init__(
        self,
        message: str,
        problems: Optional[List[Problem]] = None,
        not_checked: Optional[List[str]] = None,
        origin: str = "<string>",
    ) -> None:
        super().__init__(message)
        self.problems = list(problems or [])
        self.not_checked = list(not_checked or [])
        self.origin = origin

    @classmethod
    def _from_json(cls, message: str, detail: str) -> "PipelineError":
        d = json.loads(detail)
        problems = [Problem(p["path"], p["message"], p["tier"]) for p in d["problems"]]
        return cls(message, problems, d["not_checked"], d["origin"])


class RunError(WarplineError, RuntimeError):
    """A run could not start (its source cannot be opened, a worker thread
    was refused) or ended abnormally. Items that fail do not raise: the
    report counts them."""
