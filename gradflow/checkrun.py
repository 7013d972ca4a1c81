"""What ``gradflow.check`` returns. Apart from api.py because the command line, which runs
its own loop over files (cli/run.py), would otherwise make these classes at every start-up."""

from __future__ import annotations

from dataclasses import dataclass, field

from gradflow.analysis.report import Report
from gradflow.errors import ModelError


@dataclass
class CheckResult:
    """One checked file: its report, or the ModelError that made it invalid."""
    path: str
    report: Report | None = None
    error: ModelError | None = None

    @property
    def failed(self) -> bool:
        return self.error is not None or self.report.failed


@dataclass
class CheckRun:
    """What `gradflow check` finds for some paths, and the exit code it would give."""
    results: list = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 every file passes, 1 a check failed, 2 a file is invalid or no model was found."""
        if not self.results or any(r.error is not None for r in self.results):
            return 2
        return 1 if any(r.failed for r in self.results) else 0
