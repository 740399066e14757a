"""The validated form of a pipeline file, and the problems found while validating it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from connector_ops.registry import ActionSpec


@dataclass(frozen=True)
class Problem:
    """One validation error, located: ``file:line: step <id>: message`` (line 0: the file or folder as a whole,
    shown without a line)."""

    file: str
    line: int
    message: str
    step: str | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        if not self.step:
            return f"{where}: {self.message}"
        step = self.step if self.step.isprintable() else repr(self.step)  # an id "mk\n" on one line, quoted
        return f"{where}: step {step}: {self.message}"


class PipelineError(Exception):
    """A pipeline file has problems; ``problems`` lists every one of them."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Foreach:
    """Fan a step out over the Iterate batches of a virtual file."""

    virtual_file_id: Any  # a literal id or a template with references
    max_batch_size: int


@dataclass(frozen=True)
class Trigger:
    """``on_new_file``: a sensor starts the pipeline for each new file in a drive folder."""

    folder_id: Any  # a literal id or ``${env.NAME}``
    minimum_interval_seconds: int = 30


@dataclass(frozen=True)
class Retry:
    """``retry: {max_retries, delay, backoff}``: a Dagster ``RetryPolicy`` for a step or every step.

    Only failures that may succeed later are retried (a provider's 429/5xx/connection error); invalid
    input and not-found fail at once whatever ``max_retries`` says.
    """

    max_retries: int
    delay: float | None = None  # seconds before the first retry
    backoff: str | None = None  # "exponential" | "linear": how the delay grows


@dataclass(frozen=True)
class Asset:
    """``asset: <key>`` on a step: its output ``field`` (a virtual file or platform file) is that asset."""

    key: tuple[str, ...]
    field: str  # the output that is the asset's data
    group: str | None = None
    owners: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    """``check:`` on an asset step: Validate its virtual file after each materialisation (an asset check)."""

    name: str
    schema: dict[str, Any]
    max_rejected: int | float = 0
    severity: str = "ERROR"
    blocking: bool = False  # a failed check fails the step, so nothing downstream runs on bad data


@dataclass(frozen=True)
class Notify:
    """``notify:``: mail ``message`` (the mail action's input, templated) when a run ends as ``when`` says."""

    when: tuple[str, ...]  # "success" and/or "failure"
    message: dict[str, Any]


@dataclass
class Step:
    id: str
    action: ActionSpec
    input: dict[str, Any]
    line: int
    after: list[str] = field(default_factory=list)
    foreach: Foreach | None = None
    description: str | None = None
    retry: Retry | None = None
    asset: Asset | None = None
    check: Check | None = None


@dataclass
class Pipeline:
    name: str
    steps: list[Step]  # in dependency order
    file: str
    description: str | None = None
    schedule: str | None = None
    timezone: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    on_new_file: Trigger | None = None
    base_dir: str = "."
    retry: Retry | None = None  # every step's, unless the step has its own
    notify: list[Notify] = field(default_factory=list)  # mails sent when a run ends
    #: ``${file:path}`` -> the SHA-256 of that file's content when the pipeline was loaded (:mod:`.local_files`)
    files: dict[str, str] = field(default_factory=dict)
    #: of the validated document and ``files`` (:meth:`Document.digest`): which version of the pipeline this is
    digest: str = ""

    def step(self, step_id: str) -> Step:
        return next(s for s in self.steps if s.id == step_id)
