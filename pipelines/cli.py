"""``connector-ops pipeline …``: validate, list and run YAML pipelines.

    connector-ops pipeline validate FILE [FILE …]   every problem with file:line and step, exit 1 if any
    connector-ops pipeline list                      the pipelines the Definitions load (and the broken files)
    connector-ops pipeline run FILE|NAME [--set step.field=value …] [-v]
                                                     run in process, print each step's output and
                                                     where the outputs went (files, drive, outbox)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from connector_ops.cli import EXIT_INTERRUPTED, answered, no_progress_option, showing_warnings
from connector_ops.stdio import json_text

if TYPE_CHECKING:  # each command imports what it runs: `--help` and TAB completion load no Dagster nor pydantic
    from connector_ops.pipelines.dsl import CompiledPipeline, PipelineError
    from connector_ops.pipelines.runner import PipelineRun


def _print_problems(exc: PipelineError, stream: TextIO | None = None) -> None:
    for problem in exc.problems:
        print(problem, file=stream or sys.stdout)


@click.group()
@click.pass_context
def pipeline(ctx: click.Context) -> None:
    """YAML pipelines: validate, list, run."""
    ctx.with_resource(showing_warnings())  # the loader's notices (a schedule that fires unlike it reads)


@pipeline.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
def validate(files: tuple[str, ...]) -> None:
    """Check pipeline files without running them (every problem with file:line and step; exit 1 if any)."""
    from connector_ops.pipelines.catalog import TakenNames
    from connector_ops.pipelines.dsl import PipelineError

    failed = False
    taken = TakenNames()  # the files given are checked together, as the catalog loads the files of a folder
    for file in dict.fromkeys(files):
        try:
            # also proves the job builds, and that its names can be those of one code location
            pipeline = taken.admit(Path(file)).pipeline
        except PipelineError as exc:
            _print_problems(exc)
            failed = True
            continue
        extra = f", schedule {pipeline.schedule!r}" if pipeline.schedule else ""
        print(f"{file}: ok — job {pipeline.name}, {len(pipeline.steps)} steps{extra}")
    if failed:
        raise SystemExit(1)


@pipeline.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def list_pipelines(as_json: bool) -> None:
    """List the pipelines the Definitions load; files that do not load are reported (stderr, exit 1)."""
    from connector_ops.pipelines.catalog import read_catalog
    from connector_ops.pipelines.dsl import PipelineError

    catalog = read_catalog()
    compiled = catalog.pipelines
    if as_json:
        print(_json([{"name": item.pipeline.name, "steps": len(item.pipeline.steps), "file": str(item.pipeline.file),
                      "schedule": item.pipeline.schedule} for item in compiled]))
    else:
        for item in compiled:
            p = item.pipeline
            when = f"  [schedule {p.schedule}]" if p.schedule else ""
            print(f"{p.name:28s} {len(p.steps):3d} steps  {p.file}{when}")
    if catalog.problems:
        _print_problems(PipelineError(catalog.problems), sys.stderr)
        raise SystemExit(1)


def resolve_target(target: str) -> Path:
    from connector_ops.pipelines.catalog import find_pipeline, pipeline_files, pipelines_dir_problem

    path = Path(target)
    if path.is_file():
        return path
    found = find_pipeline(target)
    if found is None:
        names = ", ".join(sorted(p.stem for p in pipeline_files()))
        misplaced = pipelines_dir_problem()
        print(f"no pipeline file or pipeline named {target!r} (shipped files: {names})"
              + ("" if misplaced is None else f"; {misplaced}"), file=sys.stderr)
        raise SystemExit(2)
    return found


PREVIEW_ITEMS = 3


def abbreviate(value: Any, limit: int = PREVIEW_ITEMS) -> Any:
    """Long lists cut to their first items plus a note, so a step's output stays readable."""
    if isinstance(value, dict):
        return {k: abbreviate(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        head = [abbreviate(v, limit) for v in value[:limit]]
        return [*head, f"… {len(value) - limit} more"] if len(value) > limit else head
    return value


def _json(value: Any) -> str:
    return json_text(value, default=str)


def where_outputs_went(compiled: CompiledPipeline, outputs: dict[str, Any], resources: dict[str, Any]) -> list[str]:
    """Human lines pointing at every artefact: platform files on disk, drive items, links, mail."""
    files = resources.get("platform_files")
    drive = resources.get("drive")
    mail = resources.get("mail")
    lines: list[str] = []
    for step in compiled.pipeline.steps:
        value = outputs.get(step.id)
        if value is None and step.id not in outputs:
            continue
        connector = step.action.connector
        if isinstance(value, dict) and isinstance(value.get("platformFile"), dict):
            pf = value["platformFile"]
            local = files.local_id(pf) if files is not None else None
            on_disk = (f" (stored at {Path(files.files_dir) / local})"
                       if files is not None and local and not files.files_database_url else "")
            lines.append(f"{step.id}: platform file {pf.get('name')} → {pf.get('link')}{on_disk}")
        if isinstance(value, dict) and value.get("sharedLink"):
            lines.append(f"{step.id}: shared link → {value['sharedLink']}")
        if connector == "drive" and isinstance(value, dict):
            for key in ("fileId", "folderId"):
                if value.get(key):
                    where = (f" in the local drive {drive.drive_dir}"
                             if drive is not None and hasattr(drive, "drive_dir") else "")
                    lines.append(f"{step.id}: drive {key} {value[key]}{where}")
        if connector == "mail":
            outbox = getattr(mail, "outbox_dir", None)
            if outbox:
                newest = sorted(Path(outbox).glob("*.json"))
                lines.append(f"{step.id}: message written to {newest[-1] if newest else outbox}")
            else:
                lines.append(f"{step.id}: message sent through the {type(mail).__name__} backend")
    return lines


def _written_overrides(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    """``--set`` values as the command line must write them: ``oops`` is a usage error (exit 2, on stderr),
    not a problem of the pipeline file (exit 1, on stdout)."""
    from connector_ops.pipelines.dsl.validate import override_syntax_problem

    for item in values:
        problem = override_syntax_problem(item)
        if problem:
            raise click.BadParameter(problem)
    return values


@pipeline.command()
@click.argument("target", metavar="FILE|NAME")
@click.option("--set", "overrides", multiple=True, metavar="STEP.FIELD=VALUE", callback=_written_overrides,
              help="override a step input field (VALUE parsed as JSON when it is JSON); repeatable")
@click.option("-v", "--verbose", is_flag=True,
              help="show Dagster's whole log (instead of a line per step start and end, and the steps' progress)")
@click.option("--full", is_flag=True, help=f"print whole outputs (default: lists cut to {PREVIEW_ITEMS} items)")
@no_progress_option
def run(target: str, overrides: tuple[str, ...], verbose: bool, full: bool, no_progress: bool) -> None:
    """Run a pipeline (a file, or the name of a shipped one) in process and print each step's output.

    \b
    While it runs, stderr has a line when each step starts and ends, and the steps' progress every 5 s
    (--no-progress: none; -v: Dagster's whole log instead).

    \b
    Exit codes: 0 every step succeeded; 1 a step failed (whatever its status, 400 and 404 included: the
    step's error is printed) or the file does not validate; 2 no such file or pipeline, a configuration
    error (a bad setting: the line names the variable) or a usage error (a --set not written step.field=value);
    130 interrupted (Ctrl-C), 143 stopped by SIGTERM.
    """
    from connector_ops.environment import RESOURCE_KEYS
    from connector_ops.pipelines.catalog import load_checked
    from connector_ops.pipelines.dsl import PipelineError, compile_pipeline
    from connector_ops.session import Session

    path = resolve_target(target)
    try:
        compiled = compile_pipeline(load_checked(path, overrides=list(overrides)))
    except PipelineError as exc:
        _print_problems(exc)
        raise SystemExit(1) from None
    with Session() as session:
        _run(path, compiled, session.resources_for(RESOURCE_KEYS), verbose=verbose, full=full,
             progress=not no_progress)


def _run(path: Path, compiled: CompiledPipeline, resources: dict[str, Any], *, verbose: bool, full: bool,
         progress: bool = True) -> None:
    from connector_ops.pipelines.runner import run_compiled

    print(f"running {compiled.pipeline.name} ({path}) in process …", file=sys.stderr)
    run = run_compiled(compiled, resources, verbose=verbose, progress=_stderr_line if progress else None)
    answered()  # the run has ended: a Ctrl-C while its outcome is printed and the session closes changes nothing
    for step in compiled.pipeline.steps:
        if step.id in run.steps:
            value = run.steps[step.id]
            print(f"{step.id} ({step.action.name}): {_json(value if full else abbreviate(value))}")
    for step_id, message in run.warnings:  # shown by default: a step that worked may not do what was meant
        print(f"connector-ops: warning: {step_id}: {message}", file=sys.stderr)
    for check in run.result.get_asset_check_evaluations():  # `check:` steps: the finding, and the rows kept
        rejects = check.metadata.get("rejects_path")  # not `path`: that is the pipeline file's
        kept = f"; rejected rows: {rejects.value}" if rejects is not None else ""
        outcome = "passed" if check.passed else f"failed ({check.severity.value})"
        print(f"check {check.check_name} of {check.asset_key.to_user_string()}: {outcome} — {check.description}{kept}")
    lines = where_outputs_went(compiled, run.steps, resources)
    if lines:
        print("\nwhere the outputs went:")
        for line in lines:
            print(f"  {line}")
    if run.interrupted:  # the shell's code for SIGINT (the entry point's stop_code makes SIGTERM's 143)
        print(f"\nrun {run.run_id} interrupted: {', '.join(run.interrupted)} stopped before the end; "
              "what it was writing was not kept", file=sys.stderr)
        _not_run(run)
        raise SystemExit(EXIT_INTERRUPTED)
    if not run.success:
        for step_id, error in run.errors.items():
            print(f"\nstep {step_id} failed: {error.summary()}", file=sys.stderr)
            print(_json(error.body))
        if not run.errors:
            print("\nthe run failed before any step ran (see the log: -v)", file=sys.stderr)
        _not_run(run, "because of the failure")
        raise SystemExit(1)
    print(f"\nrun {run.run_id} succeeded", file=sys.stderr)


def _stderr_line(line: str) -> None:
    """A line of the run's progress (a step started or ended, its ops' progress) at once on stderr: stdout
    keeps the outputs only."""
    print(line, file=sys.stderr, flush=True)


def _not_run(run: PipelineRun, why: str = "") -> None:
    skipped = [step for step, status in run.status.items() if status in ("skipped", "not run")]
    if skipped:
        print(f"not run{' ' + why if why else ''}: {', '.join(skipped)}", file=sys.stderr)


@click.command("gc")
@click.option("--older-than", "older_than", default="7d", show_default=True, metavar="AGE",
              help="only files made before now minus AGE (s, m, h, d, w: 12h, 7d, 0s) can be removed")
@click.option("--dry-run", is_flag=True, help="list what would be removed; remove nothing")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def gc(older_than: str, dry_run: bool, as_json: bool) -> None:
    """Remove virtual files and platform files that no asset, recent run or job's latest successful run refers
    to (run history: the Dagster instance of DAGSTER_HOME)."""
    import os

    from connector_ops.environment import Env
    from connector_ops.pipelines.gc import collect, parse_duration
    from connector_ops.pipelines.gc_unused import unused_stores
    from connector_ops.pipelines.instance import home_instance
    from connector_ops.resources.virtual_files.step_outputs import StepOutputs
    from connector_ops.session import Session

    age = parse_duration(older_than)
    instance = home_instance()
    if instance is None:
        print("connector-ops: warning: DAGSTER_HOME is not set, so there is no run or asset history to consult; "
              f"only age protects a file (files made in the last {older_than} are kept)", file=sys.stderr)
    with Session() as session:
        stores = session.resources_for(["virtual_files", "platform_files"])
        if os.environ.get("CONNECTOR_OPS_DATABASE_URL"):  # a mistyped SQLite URL is not an empty store to sweep;
            stores["virtual_files"].check_exists()  # the home's own database, not there yet, is one (collect)
        if dry_run:  # a dry run changes nothing: not even the store's start removes a killed writer's leftovers
            stores["platform_files"].keep_leftovers()
        else:  # and a real one removes them whenever the last start swept (a start sweeps once an hour)
            stores["platform_files"].sweep()
        result = collect(stores["virtual_files"], stores["platform_files"], instance, older_than=age, dry_run=dry_run,
                         step_outputs=StepOutputs(stores["virtual_files"].database_url))
        result.unused_stores = unused_stores(Env(session.environ()).home, stores["virtual_files"],
                                             stores["platform_files"])
        answered()  # removed: a Ctrl-C while the session closes and the result is printed changes nothing
    for unused in result.unused_stores:  # before the counts: "0 removed" is not "nothing left"
        print(f"connector-ops: notice: {unused.notice()}", file=sys.stderr)
    if as_json:
        print(json.dumps(result.to_json(), indent=2))
        return
    if not result.stored:
        print(f"nothing to collect: nothing was ever stored here yet ({_store_place(stores)})")
        return
    verb = "would remove" if dry_run else "removed"
    for vf_id in result.virtual_files:
        print(f"{verb} virtual file {vf_id}")
    for file_id in result.platform_files:
        print(f"{verb} platform file {file_id}")
    if result.step_output_runs or result.kept_step_output_runs:
        print(f"{verb} the step outputs of {len(result.step_output_runs)} run(s); kept those of "
              f"{result.kept_step_output_runs}")
    if result.array_positions or result.kept_array_positions:
        print(f"{verb} {result.array_positions} inline-array Iterate position(s) not moved since the cutoff; kept "
              f"{result.kept_array_positions}")
    print(f"{verb} {len(result.virtual_files)} virtual file(s) and {len(result.platform_files)} platform file(s); "
          f"kept {result.kept_virtual_files} and {result.kept_platform_files} (made after "
          f"{result.cutoff:%Y-%m-%d %H:%M:%S} UTC or still referred to)")
    for run in result.unweighed_runs:
        when, what_to_do = (
            (f"ended {run.ended:%Y-%m-%d %H:%M:%S} UTC", "every file made before it ended was kept. Run the job "
             "once with this version and gc can weigh its files again. If the job no longer exists (removed or "
             "renamed), no run of it ever will: delete this run (`dagster run delete "
             f"{run.run_id}`, or in the UI) and gc weighs its files again") if run.ended is not None else
            (f"not finished, started {run.reads_until:%Y-%m-%d %H:%M:%S} UTC", "every file made before it started "
             "was kept. If it is stuck (its process gone), terminate it in the UI; once it has ended and the job has "
             "run once with this version, gc weighs its files again"))
        print(f"connector-ops: warning: run {run.run_id} of job {run.job} ({when}) was made by a connector-ops "
              "version that did not record what its steps read, and gc must keep what it read (the job's latest "
              f"successful run, or a recent run): {what_to_do}", file=sys.stderr)
    if result.compaction is not None:
        before, after = (f"{n / 2**20:,.1f} MiB" for n in (result.compaction.before, result.compaction.after))
        if result.compaction.busy:
            print(f"connector-ops: warning: the SQLite database was in use, so it was not compacted ({before} -> "
                  f"{after} on disk): run gc again when no run is using it", file=sys.stderr)
        else:
            print(f"{'would compact' if dry_run else 'compacted'} the SQLite database: {before} -> {after} on disk")


def _store_place(stores: dict[str, Any]) -> str:
    """Where gc looked, in words that show a mistyped home: the SQLite file and files folder, or, for a
    database whose URL is a secret, just that it is the configured database."""
    database = stores["virtual_files"].sqlite_file or "the database of CONNECTOR_OPS_DATABASE_URL"
    platform = stores["platform_files"]
    files = "the same database" if platform.files_database_url else platform.files_dir
    return f"virtual files: {database}; platform files: {files}"


@pipeline.command("schema")
def schema() -> None:
    """Print the JSON Schema of pipeline files (for editors; also shipped as pipelines/pipeline.schema.json)."""
    from connector_ops.pipelines.dsl.json_schema import pipeline_schema

    print(json_text(pipeline_schema(), indent=2))
