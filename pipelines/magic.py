"""``%pipeline run NAME_OR_FILE``: a YAML pipeline or a Dagster job, run in process from a notebook.

The job runs through Dagster's engine (``execute_in_process``) — the same ops, wiring and config a
deployment runs — with the session's resources (``%connectors``), so what a pipeline produced can be
inspected with the ``%etl``/``%drive`` magics in the next cell. Dagster's console log is silenced;
instead a line says when each step starts and ends (and what its ops report of their progress, every few
seconds) while the run goes, and every step's status and outputs are shown in one table and kept in a
:class:`~connector_ops.pipelines.runner.PipelineRun`,
also when a step fails — which is what debugging a pipeline cell by cell needs: run it, look at the
step that failed, re-run that action with ``%etl``, fix the file, run again.

For a YAML pipeline (a file, or the name of one in the pipeline catalog) steps are the file's step ids
and outputs carry the spec's field names, exactly as ``${step.field}`` references see them
(``run["load"]["virtualFileId"]``); ``--set step.field=value`` edits the file's input for this run.
For any other job, steps are Dagster step keys and outputs the op output names.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg
from IPython.core.magic import Magics, line_magic, magics_class

from connector_ops.display import StatusTable
from connector_ops.kernel.deferred import interrupts_deferred
from connector_ops.kernel.errors import ConnectorError
from connector_ops.kernel.notices import warnings_to
from connector_ops.magic import ConnectorMagics, NotebookError, line_words, stopped, warning_line
from connector_ops.magic_input import WordsParser, python_name
from connector_ops.magic_session import one_line
from connector_ops.pipelines.recorder import Recorder, pipeline_name_for
from connector_ops.pipelines.run_progress import RunProgress
from connector_ops.pipelines.runner import PipelineRun, run_compiled
from connector_ops.pipelines.runner import run_job as run_in_process

logger = logging.getLogger(__name__)

USAGE = "%pipeline run NAME_OR_FILE [--set STEP.FIELD=VALUE …] [-o VAR]"
RECORD_USAGE = "%pipeline record [--new | stop] | %pipeline show | %pipeline export FILE.yaml [--name NAME]"
COMMANDS = "run, record, show, export"


class PipelineUsageError(ConnectorError):
    def __init__(self, message: str, action: str = "pipeline") -> None:
        super().__init__(400, {"message": message}, action=action)


def _definitions(magics: ConnectorMagics) -> dg.Definitions:
    if magics.session.definitions is not None:
        return magics.session.definitions
    from connector_ops.magic_session import load_object

    return load_object("connector_ops.pipelines:defs")


def _jobs(defs: dg.Definitions) -> dict[str, dg.JobDefinition]:
    return {job.name: job for job in (defs.jobs or []) if isinstance(job, dg.JobDefinition)}


def compile_file(path: Path, overrides: list[str]) -> Any:
    """The YAML pipeline compiled (all of its problems on one line when it does not validate)."""
    from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline

    try:
        return compile_pipeline(load_pipeline(path, overrides=overrides))
    except PipelineError as exc:
        raise PipelineUsageError("; ".join(str(p) for p in exc.problems), action=f"pipeline {path.name}") from None


def resolve(magics: ConnectorMagics, target: str, overrides: list[str]) -> tuple[dg.JobDefinition, Any]:
    """(job, compiled YAML pipeline or None): a YAML file, a pipeline of the catalog, or a job name."""
    path = Path(target).expanduser()
    if target.endswith((".yaml", ".yml")) or path.is_file():
        if not path.is_file():
            raise PipelineUsageError(f"no pipeline file {target!r}")
        compiled = compile_file(path, overrides)
        return compiled.job, compiled
    from connector_ops.pipelines.catalog import find_pipeline, pipelines_dir_problem

    found = find_pipeline(target)
    if found is not None:
        compiled = compile_file(found, overrides)
        return compiled.job, compiled
    if overrides:
        raise PipelineUsageError("--set works with YAML pipelines only")
    jobs = _jobs(_definitions(magics))
    if target not in jobs:
        misplaced = pipelines_dir_problem()
        raise PipelineUsageError(f"no pipeline or job named {target!r}; jobs: {', '.join(sorted(jobs)) or 'none'}"
                                 + ("" if misplaced is None else f"; {misplaced}"))
    return jobs[target], None


@functools.cache
def _dagster_imported() -> None:
    """Run a job that does nothing, once per process, so that Dagster imports what a run needs (332
    modules, 0.64 s) while a Stop is held back (:mod:`connector_ops.kernel.deferred`): the user's run then
    imports nothing of Dagster's, and a Stop during it cannot cut an import in half. In an instance of its
    own, so that no run history shows it."""
    @dg.op
    def nothing() -> None:
        return None

    @dg.job
    def connector_ops_warm_up() -> None:
        nothing()

    with interrupts_deferred():
        try:
            run_in_process(connector_ops_warm_up, {}, instance=dg.DagsterInstance.ephemeral())
        except Exception:  # only a safeguard: the user's run goes ahead, and reports its own problems
            logger.debug("the empty run before the first %%pipeline run failed", exc_info=True)


def _cell_line(line: str) -> None:
    """A line of the run's progress in the cell's output, as it happens (the table follows at the end)."""
    print(line, flush=True)


def run_pipeline(job: dg.JobDefinition, compiled: Any, resources: Mapping[str, Any]) -> PipelineRun:
    """A run as ``connector-ops pipeline run`` makes it: a YAML pipeline's through the runner's
    ``run_compiled`` (its ``notify:`` mails sent, its steps' warnings kept), any other job as it is. A
    definition problem (e.g. a resource missing from the session) becomes one line instead of a traceback."""
    _dagster_imported()
    try:
        if compiled is not None:
            return run_compiled(compiled, resources, progress=_cell_line)
        return PipelineRun(job.name, run_in_process(job, resources, listener=RunProgress(_cell_line)), None)
    except dg.DagsterError as exc:
        raise PipelineUsageError(one_line(exc), action=f"pipeline {job.name}") from None


def _parser() -> WordsParser:
    parser = WordsParser("%pipeline run", action="pipeline")
    parser.add_argument("target")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("-o", "--out", type=python_name)
    return parser


def list_jobs(magics: ConnectorMagics) -> StatusTable:
    rows = [{"job": name, "description": (job.description or "").strip().splitlines()[0] if job.description else ""}
            for name, job in sorted(_jobs(_definitions(magics)).items())]
    return StatusTable("jobs", rows, [f"usage: {USAGE}"])


def record_command(recorder: Recorder, words: list[str]) -> None:
    """``%pipeline record [--new | stop]``, ``%pipeline show``, ``%pipeline export FILE.yaml [--name NAME]``."""
    command, rest = words[0], words[1:]
    if command == "record" and rest in ([], ["--new"]):
        kept = 0 if rest else len(recorder.steps)
        recorder.start(new=bool(rest))
        resumed = (f"recording resumed after the {kept} step(s) kept (%pipeline record --new starts over)"
                   if kept else "recording")
        print(f"{resumed}: each successful %etl, %drive and %mail call becomes a step "
              "(%pipeline show, %pipeline export FILE.yaml, %pipeline record stop)")
    elif command == "record" and rest == ["stop"]:
        recorder.active = False
        print(f"recording stopped: {len(recorder.steps)} step(s) kept for %pipeline show / export")
    elif command in ("show", "export") and not recorder.steps:
        state = "nothing recorded yet" if recorder.active else "not recording; start with %pipeline record"
        raise PipelineUsageError(f"{state}: run %etl, %drive or %mail cells first", action=f"pipeline {command}")
    elif command == "show" and not rest:
        print(recorder.yaml("recorded"), end="")
    elif command == "export":
        parser = WordsParser("%pipeline export", action="pipeline export")
        parser.add_argument("file")
        parser.add_argument("--name")
        args = parser.parse_args(rest)
        if not args.file.endswith((".yaml", ".yml")):
            raise PipelineUsageError(f"{args.file!r}: the file name must end in .yaml or .yml",
                                     action="pipeline export")
        from connector_ops.pipelines.dsl import PipelineError

        name = args.name or pipeline_name_for(args.file)
        try:
            target = recorder.export(args.file, name)
        except OSError as exc:
            raise PipelineUsageError(f"cannot write {args.file!r}: {exc.strerror or exc}",
                                     action="pipeline export") from None
        except PipelineError as exc:
            problems = "; ".join(f"step {p.step}: {p.message}" if p.step else p.message for p in exc.problems)
            raise PipelineUsageError(f"not written: the pipeline would not pass `pipeline validate`: {problems}",
                                     action="pipeline export") from None
        print(f"wrote {target}: pipeline {name}, {len(recorder.steps)} step(s); "
              f"check it with `connector-ops pipeline validate {args.file}`, run it with "
              f"`connector-ops pipeline run {args.file}` or %pipeline run {args.file}")
    else:
        raise PipelineUsageError(f"usage: {RECORD_USAGE}", action=f"pipeline {command}")


def pipeline_command(magics: ConnectorMagics, words: list[str], recorder: Recorder | None = None) -> Any:
    """``%pipeline`` (list the jobs), ``%pipeline run NAME_OR_FILE [--set …] [-o VAR]`` and the
    recording commands (``record``, ``show``, ``export``)."""
    if not words:
        return list_jobs(magics)
    if words[0] in ("record", "show", "export") and recorder is not None:
        record_command(recorder, words)
        return None
    if words[0] != "run":
        raise PipelineUsageError(f"unknown %pipeline command {words[0]!r}; commands: {COMMANDS}; use: {USAGE}")
    args = _parser().parse_args(words[1:])
    with warnings_to(warning_line):  # the loader's notices (a schedule that fires unlike it reads), below the cell
        job, compiled = resolve(magics, args.target, args.overrides)
    run = run_pipeline(job, compiled, magics.session.resources())
    for step_id, message in run.warnings:  # as the command prints them: a step that worked may not do what was meant
        print(f"warning: {step_id}: {message}", file=sys.stderr)
    if args.out:
        magics.shell.user_ns[args.out] = run
    error = run.failure()
    if error is not None:
        formatter = magics.shell.display_formatter
        assert formatter is not None  # (set as the shell starts)
        data, metadata = formatter.format(run)  # what ran and what failed, shown
        magics.shell.display_pub.publish(data=data, metadata=metadata)  # before the one-line error
        if run.interrupted:  # the cell ends as Stop ends an %etl cell
            raise stopped(f"pipeline {run.name} stopped: {', '.join(run.interrupted)} stopped before the end; "
                          "what it was writing was not kept")
        raise error
    return run


@magics_class
class PipelineMagics(Magics):
    """``%pipeline``: registered by this module (the top floor), next to the action magics it uses."""

    def __init__(self, shell: Any, connector: ConnectorMagics) -> None:
        super().__init__(shell)
        self.connector = connector
        # a pushed DataFrame's snapshot is pulled with the session's resources, as the cell's own actions run
        self.recorder = Recorder(resources=lambda: connector.session.resources(("virtual_files", "platform_files")))
        connector.listeners.append(self.recorder)

    @line_magic
    def pipeline(self, line: str = "") -> Any:
        """Run a Dagster job or a YAML pipeline in process and show each step's result.

        %pipeline                          the jobs you can run by name
        %pipeline run NAME_OR_FILE [--set STEP.FIELD=VALUE …] [-o VAR]
        %pipeline record                   from now on, each successful %etl/%drive/%mail call is a step
                                           (after a stop: goes on after the kept steps)
        %pipeline record --new             start over: drop the steps recorded so far
        %pipeline record stop              stop recording (the steps are kept)
        %pipeline show                     the recorded pipeline as YAML
        %pipeline export FILE.yaml [--name NAME]   write it (then `connector-ops pipeline run FILE.yaml`)
        """
        try:
            words, hidden = line_words(line)
            result = pipeline_command(self.connector, words, self.recorder)
        except ConnectorError as exc:
            raise NotebookError.from_error(exc) from None
        return None if hidden else result


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%pipeline`` beside the action magics (loading those first if needed)."""
    connector = ConnectorMagics.instance_in(ipython)
    if connector is None:
        ipython.extension_manager.load_extension("connector_ops.magic")
        connector = ConnectorMagics.instance_in(ipython)
        assert connector is not None  # (registered by the extension just loaded)
    ipython.register_magics(PipelineMagics(ipython, connector))
