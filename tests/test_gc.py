"""``connector-ops gc`` (issue 12, item 7): what nothing refers to goes, what something refers to stays.

Real runs on a real Dagster instance (ephemeral, or ``DAGSTER_HOME`` for the CLI), real stores on both
databases. The property test replays random run histories — jobs that succeed and fail, files nobody
refers to, a random cutoff — and checks that gc never removes a file a recent run, an unfinished run, a
job's latest successful run or an asset's latest materialisation names.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector_ops import invoke
from connector_ops.environment import resources_for
from connector_ops.kernel.atomic import SWEPT_STAMP
from connector_ops.kernel.errors import InvalidInput
from connector_ops.ops import etl_pull, etl_push
from connector_ops.ops.assets import action_asset
from connector_ops.ops.checks import validate_check
from connector_ops.pipelines.cli import gc as gc_command
from connector_ops.pipelines.gc import collect, deletable_runs, parse_duration
from tests.conftest import resources_on
from tests.counting_run_storage import CountingRunStorage

SALES = Path(__file__).resolve().parent.parent / "pipelines" / "data" / "sales.csv"
PULL = {"exportType": "csv", "exportName": "out.csv"}


@pytest.fixture
def database_url(own_database_url: str) -> str:
    """A database of this test's own: gc sweeps a whole store."""
    return own_database_url


@dg.job
def push_only():
    etl_push()


@dg.job
def push_and_pull():
    etl_pull(virtual_file_id=etl_push())


def run_job(job: dg.JobDefinition, resources: dict[str, Any], instance: dg.DagsterInstance, pf: dict,
            fail: bool = False) -> dg.ExecuteInProcessResult:
    """One run; ``fail`` makes the Pull (or the Push) refuse its input after the Push stored its file."""
    config: dict[str, Any] = {"etl_push": {"config": {"platformFile": pf}}}
    if job is push_and_pull:
        config["etl_pull"] = {"config": {**PULL, "parameters": {"csvDelimiter": "too long"}} if fail else PULL}
    elif fail:
        config["etl_push"]["config"]["parameters"] = {"csvDelimiter": "too long"}
    return job.execute_in_process(resources=resources, instance=instance, run_config={"ops": config},
                                  raise_on_error=False)


def outputs_of(result: dg.ExecuteInProcessResult) -> set[str]:
    """The virtual file ids and platform file ids a run's steps produced."""
    ids = set()
    for event in result.all_events:
        if event.event_type == dg.DagsterEventType.STEP_OUTPUT:
            node = event.step_key
            value = result.output_for_node(node, event.step_output_data.output_name)
            ids.add(value["id"] if isinstance(value, dict) else value)
    return ids


def inventory(resources: dict[str, Any]) -> tuple[set[str], set[str]]:
    return ({vf for vf, _ in resources["virtual_files"].inventory()},
            {pf for pf, _ in resources["platform_files"].inventory()})


def test_durations_are_read_with_their_unit():
    assert parse_duration("7d") == timedelta(days=7)
    assert parse_duration("12h") == timedelta(hours=12)
    assert parse_duration("0s") == timedelta(0)
    assert parse_duration(" 2w ") == timedelta(weeks=2)
    with pytest.raises(InvalidInput, match=r"--older-than: '7 days' is not a duration"):
        parse_duration("7 days")
    for too_long in ("999999w", "99999999999d"):  # an OverflowError (a 500) when the cutoff was computed
        with pytest.raises(InvalidInput, match=rf"--older-than: '{too_long}' is too long"):
            parse_duration(too_long)


def test_a_file_written_for_long_is_dated_when_its_write_ends(env, tmp_path):
    """gc dates a platform file by when its write ended, as its lastModified, on every backend: PostgreSQL's
    now() (the write's transaction start) removed a file written for longer than --older-than right away."""
    for backend in ("local", "database"):
        res = resources_for(["platform_files", "virtual_files"], {
            **env, "CONNECTOR_OPS_FILES_BACKEND": backend, "CONNECTOR_OPS_HOME": str(tmp_path / backend)})
        store = res["platform_files"]
        with store.create("slow.csv") as sink:
            sink.write(b"a\n" * (1 << 20))  # the first chunk sent: the transaction is under way
            time.sleep(1.5)
            sink.write(b"1\n")
        result = collect(res["virtual_files"], store, None, older_than=timedelta(seconds=1))
        assert result.platform_files == [], backend
        assert [file_id for file_id, _ in store.inventory()] == [sink.descriptor.id]


def test_a_virtual_file_is_dated_when_its_write_ends(resources):
    """A virtual file was dated when its write began (its catalog row first; on PostgreSQL now() is the
    transaction's start): a Push or Join longer than --older-than was removed as soon as it was made."""
    store = resources["virtual_files"]

    def slow_rows() -> Any:
        yield [["1", "a"]]
        time.sleep(2.2)
        yield [["2", "b"]]

    class SlowCsv(io.RawIOBase):  # a column-wise load: SQLite's loader process, PostgreSQL's COPY
        def __init__(self) -> None:
            self.parts = [b"1,a\n", b"2,b\n"]

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            if not self.parts:
                return 0
            if len(self.parts) == 1:
                time.sleep(2.2)
            part = self.parts.pop(0)
            buffer[:len(part)] = part
            return len(part)

    for write in (lambda: store.create_from_batches(["id", "name"], slow_rows()),
                  lambda: store.sql.create_from_csv(["id", "name"], io.BufferedReader(SlowCsv(), 4), ",")):
        vf_id = write()
        result = collect(store, resources["platform_files"], None, older_than=timedelta(seconds=2))
        assert result.virtual_files == [] and vf_id in inventory(resources)[0]
        assert store.summary(vf_id)[0] == 2
        store.drop(vf_id)


def test_gc_drops_many_files_per_transaction(resources, files):
    """gc dropped one virtual file per transaction: on SQLite each costs in proportion to the schema (one table
    per file), 52 s for 5,000 files and 363 s for 20,000; on PostgreSQL one flush per file (415 s for 10,000).
    Now a few transactions drop them all, and the counts stay exact: a file written since gc listed it stays,
    one removed meanwhile counts as removed."""
    from connector_ops.resources.virtual_files.engines import get_engine
    from connector_ops.resources.virtual_files.writing import drop_batch

    store = resources["virtual_files"]
    ids = [store.create_from_batches(["n"], [[[str(i)]]]) for i in range(40)]
    engine = get_engine(store.database_url)
    commits: list[object] = []
    count = commits.append
    sa.event.listen(engine, "commit", count)
    try:
        result = collect(store, files, None, older_than=timedelta(0))
    finally:
        sa.event.remove(engine, "commit", count)
    assert sorted(result.virtual_files) == sorted(ids) and result.kept_virtual_files == 0
    assert store.inventory() == []
    assert len(commits) <= len(ids) // drop_batch(engine.dialect.name) + 5, len(commits)  # one per file: 40+

    kept, dropped, gone = (store.create_from_batches(["n"], [[["x"]]]) for _ in range(3))
    listed = store.inventory()
    _backdate(store, kept, 1)  # dated anew since the listing, as a write would
    store.drop(gone)
    assert sorted(store.drop_unchanged(listed)) == sorted([dropped, gone])
    assert [vf_id for vf_id, _ in store.inventory()] == [kept]


def _backdate(store: Any, vf_id: str, days: int) -> None:
    from connector_ops.resources.virtual_files.catalog import virtual_file
    from connector_ops.resources.virtual_files.engines import get_engine

    with get_engine(store.database_url).begin() as conn:
        conn.execute(sa.update(virtual_file).where(virtual_file.c.id == vf_id)
                     .values(created_at=datetime.now(UTC) - timedelta(days=days)))


def test_a_rewritten_virtual_file_is_dated_by_its_last_write(resources, files):
    """Map over itself, Append Rows and Delete Rows left the date a file was first made: the default gc
    (7d) removed a file whose rows were written minutes ago."""
    store = resources["virtual_files"]
    vf = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()}, resources)["virtualFileId"]
    writes = [("etl.map", {"virtualFileId": vf, "action": "trim", "overwriteVirtualFile": True}),
              ("etl.append_rows", {"rows": [{"virtualFileId": vf, "content": {"order_id": "today"}}]}),
              ("etl.delete_rows", {"virtualFileId": vf, "request": {"order_id": "today"}})]
    for action, payload in writes:
        _backdate(store, vf, 10)
        assert vf in collect(store, files, None, older_than=timedelta(days=7), dry_run=True).virtual_files
        invoke(action, payload, resources)
        assert dict(store.inventory())[vf] > datetime.now(UTC) - timedelta(minutes=1), action
        assert collect(store, files, None, older_than=timedelta(days=7)).virtual_files == [], action
    _backdate(store, vf, 10)
    invoke("etl.delete_rows", {"virtualFileId": vf, "request": {"order_id": "never"}}, resources)
    assert vf in collect(store, files, None, older_than=timedelta(days=7), dry_run=True).virtual_files  # unchanged


def test_only_what_nothing_refers_to_is_removed(resources, files):
    instance = dg.DagsterInstance.ephemeral()
    pf = files.add_file(SALES).to_json()
    first = run_job(push_and_pull, resources, instance, pf)
    second = run_job(push_and_pull, resources, instance, pf)
    failed = run_job(push_and_pull, resources, instance, pf, fail=True)
    assert first.success and second.success and not failed.success
    stray = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]  # nothing refers to it

    result = collect(resources["virtual_files"], resources["platform_files"], instance,
                     older_than=timedelta(0), dry_run=True)
    vfs, pfs = inventory(resources)
    assert stray in result.virtual_files and stray in vfs  # a dry run removes nothing
    removable = set(result.virtual_files) | set(result.platform_files)
    assert removable == outputs_of(first) | outputs_of(failed) | {stray}  # old runs' products and the stray
    assert pf["id"] not in removable  # the latest good run's input (in its run config)

    done = collect(resources["virtual_files"], resources["platform_files"], instance, older_than=timedelta(0))
    assert set(done.virtual_files) | set(done.platform_files) == removable
    vfs, pfs = inventory(resources)
    assert outputs_of(second) <= vfs | pfs and pf["id"] in pfs
    assert not removable & (vfs | pfs)
    assert collect(resources["virtual_files"], resources["platform_files"], instance,
                   older_than=timedelta(0)).virtual_files == []  # nothing left to do


def test_gc_reads_only_the_runs_it_weighs(resources, files, tmp_path):
    """gc read every run of the history into memory each time (50,000 runs: 10 s, 300 MiB, growing with each
    run) to use only the recent and unfinished runs, their ancestors and each job's latest success. Now it asks
    the run storage for those: with 200 old runs stored, gc reads a handful — counted where Dagster
    deserialises each run — and removes and keeps exactly what it did."""
    (tmp_path / "dagster.yaml").write_text(
        "run_storage:\n  module: tests.counting_run_storage\n  class: CountingRunStorage\n"
        f"  config:\n    base_dir: {tmp_path / 'history'}\n")
    instance = dg.DagsterInstance.from_config(str(tmp_path))
    pf = files.add_file(SALES).to_json()
    first = run_job(push_and_pull, resources, instance, pf)
    second = run_job(push_and_pull, resources, instance, pf)
    failed = run_job(push_and_pull, resources, instance, pf, fail=True)
    assert first.success and second.success and not failed.success
    stray, older, latest, parents, running = (invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
                                              for _ in range(5))

    def add(status: dg.DagsterRunStatus, vf: str, **chain: str) -> str:
        run = dg.DagsterRun(job_name="nightly_export", status=status, **chain,
                            run_config={"ops": {"load": {"config": {"virtual_file_id": vf}}}})
        return instance.add_run(run).run_id

    for n in range(200):  # a year of an old job's runs, each naming the file the last success replaced
        add(dg.DagsterRunStatus.FAILURE if n % 20 == 0 else dg.DagsterRunStatus.SUCCESS, older)
    parent = add(dg.DagsterRunStatus.FAILURE, parents)  # the parent of a re-execution still running
    add(dg.DagsterRunStatus.SUCCESS, latest)
    add(dg.DagsterRunStatus.STARTED, running, parent_run_id=parent, root_run_id=parent)
    assert instance.get_runs_count() == 206

    storage = instance.run_storage
    assert isinstance(storage, CountingRunStorage)
    storage.runs_read = 0
    result = collect(resources["virtual_files"], resources["platform_files"], instance,
                     older_than=timedelta(0), dry_run=True, now=datetime.now(UTC) + timedelta(days=30))
    removable = set(result.virtual_files) | set(result.platform_files)
    assert removable == outputs_of(first) | outputs_of(failed) | {stray, older}
    assert not removable & {pf["id"], latest, parents, running}
    # the running re-execution, its parent, and the latest success of each of the two jobs
    assert storage.runs_read == 4


def test_deleting_the_runs_gc_does_not_weigh_changes_nothing_it_keeps(resources, files, tmp_path):
    """Open-source Dagster keeps every run for good; deleting old runs bounds the history, but deleting a job's
    latest successful run made gc remove the input its next run reads (nothing named it any more).
    ``deletable_runs`` lists the runs that can go without changing gc's answer."""
    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))
    pf = files.add_file(SALES).to_json()
    first = run_job(push_and_pull, resources, instance, pf)
    second = run_job(push_and_pull, resources, instance, pf)
    failed = run_job(push_and_pull, resources, instance, pf, fail=True)
    raw = action_asset("gc/trim", "etl.push", {"platformFile": files.add_file(SALES).to_json()})
    materialised = [dg.materialize([raw], resources=resources, instance=instance) for _ in range(2)]
    assert first.success and second.success and not failed.success and all(m.success for m in materialised)
    later = datetime.now(UTC) + timedelta(days=30)

    def weighed() -> tuple[list[str], list[str], int, int]:
        result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7), now=later,
                         dry_run=True)
        return (sorted(result.virtual_files), sorted(result.platform_files), result.kept_virtual_files,
                result.kept_platform_files)

    before = weighed()
    assert pf["id"] not in before[1]  # the latest good run's input
    deletable = deletable_runs(instance, older_than=timedelta(days=7), now=later)
    assert sorted(deletable) == sorted([first.run_id, failed.run_id, materialised[0].run_id])
    assert deletable_runs(instance, older_than=timedelta(days=7)) == []  # none is older than 7 days yet
    for run_id in deletable:
        instance.delete_run(run_id)
    assert weighed() == before

    instance.delete_run(second.run_id)  # the job's latest successful run: what the docs warn against
    assert pf["id"] in weighed()[1]


def test_recent_files_stay_whatever_refers_to_them(resources, files):
    pf = files.add_file(SALES).to_json()
    stray = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    result = collect(resources["virtual_files"], resources["platform_files"], None, older_than=timedelta(days=7))
    assert result.virtual_files == [] and result.platform_files == []
    later = datetime.now(UTC) + timedelta(days=8)
    result = collect(resources["virtual_files"], resources["platform_files"], None, older_than=timedelta(days=7),
                     now=later)
    assert result.virtual_files == [stray] and result.platform_files == [pf["id"]]


def test_an_assets_latest_data_stays(resources, files):
    instance = dg.DagsterInstance.ephemeral()
    pf = files.add_file(SALES).to_json()
    raw = action_asset("gc/raw", "etl.push", {"platformFile": pf})
    for _ in range(2):  # a re-materialisation replaces the asset's named file: one table, not one per run
        assert dg.materialize([raw], resources=resources, instance=instance).success
        assert {vf for vf, _ in resources["virtual_files"].inventory()} == {"asset:gc/raw"}
    stray = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    removed = collect(resources["virtual_files"], resources["platform_files"], instance,
                      older_than=timedelta(0), now=datetime.now(UTC) + timedelta(days=30))
    vfs, _ = inventory(resources)
    assert "asset:gc/raw" in vfs and removed.virtual_files == [stray]


def test_the_rejected_rows_of_a_jobs_latest_check_stay(resources, files):
    instance = dg.DagsterInstance.ephemeral()
    pf = files.add_file(SALES).to_json()
    raw = action_asset("gc/checked", "etl.push", {"platformFile": pf})
    check = validate_check("gc/checked", {"quantity": {"type": "integer", "required": True}}, max_rejected=0.5)
    result = dg.materialize([raw, check], resources=resources, instance=instance)
    [found] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    collect(resources["virtual_files"], resources["platform_files"], instance, older_than=timedelta(0),
            now=datetime.now(UTC) + timedelta(days=30))
    vfs, pfs = inventory(resources)
    assert {found.metadata["rejects_virtual_file_id"].value, found.metadata["validated_virtual_file_id"].value} <= vfs
    assert found.metadata["rejects_platform_file_id"].value in pfs


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sales_report_repeated_ten_times_leaves_the_store_bounded(env):
    from connector_ops.pipelines.definitions import build_definitions

    resources = resources_for(environ=env)
    job = build_definitions().get_job_def("sales_report")
    instance = dg.DagsterInstance.ephemeral()
    sizes = []
    for _ in range(10):
        result = job.execute_in_process(resources=resources, instance=instance)
        assert result.success
        collect(resources["virtual_files"], resources["platform_files"], instance, older_than=timedelta(0))
        vfs, pfs = inventory(resources)
        sizes.append((len(vfs), len(pfs)))
        report = result.output_for_node("report", "platform_file")
        assert resources["platform_files"].read_bytes(report).startswith(b"order_id,")  # the latest stays
    assert len(set(sizes[1:])) == 1, sizes  # from the second run on, every gc leaves the same number of files


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(history=st.lists(st.tuples(st.sampled_from(["push_only", "push_and_pull", "stray"]), st.booleans()),
                        min_size=1, max_size=6),
       cut=st.integers(min_value=0, max_value=6))
def test_gc_never_removes_what_is_still_referred_to(tmp_path_factory, database_url, history, cut):
    home = tmp_path_factory.mktemp("gc-home")
    env = {"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{home / 'vf.db'}"}
    resources = resources_for(environ=env)
    instance = dg.DagsterInstance.ephemeral()
    pf = resources["platform_files"].add_file(SALES).to_json()
    jobs = {"push_only": push_only, "push_and_pull": push_and_pull}
    runs: list[tuple[str, dg.ExecuteInProcessResult]] = []
    cutoff = None
    for index, (kind, fail) in enumerate(history):
        if index == cut:
            cutoff = datetime.now(UTC)
        if kind == "stray":
            invoke("etl.push", {"platformFile": pf}, resources)
        else:
            runs.append((kind, run_job(jobs[kind], resources, instance, pf, fail=fail)))
    now = cutoff or datetime.now(UTC)
    referring = [r for _k, r in runs if instance.get_run_record_by_id(r.run_id).create_timestamp >= now]  # recent
    for kind in jobs:
        good = [r for k, r in runs if k == kind and r.success]
        referring += good[-1:]  # the job's latest successful run
    protected = {pf["id"]} if referring else set()  # the input file is in their run config
    for result in referring:
        protected |= outputs_of(result)
    done = collect(resources["virtual_files"], resources["platform_files"], instance, older_than=timedelta(0),
                   now=now)
    vfs, pfs = inventory(resources)
    assert protected <= vfs | pfs
    assert not (set(done.virtual_files) | set(done.platform_files)) & protected


def test_step_outputs_go_with_their_runs(resources, files, env):
    from connector_ops.ops.io_manager import StepOutputIOManager
    from connector_ops.resources.virtual_files.step_outputs import StepOutputs

    outputs = StepOutputs(env["CONNECTOR_OPS_DATABASE_URL"])
    instance = dg.DagsterInstance.ephemeral()
    pf = files.add_file(SALES).to_json()
    runs = [run_job(push_and_pull, {**resources, "io_manager": StepOutputIOManager()}, instance, pf).run_id
            for _ in range(2)]
    assert {run for run, _ in outputs.runs()} == set(runs)
    kept = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7), step_outputs=outputs)
    assert kept.step_output_runs == [] and kept.kept_step_output_runs == 2
    planned = collect(resources["virtual_files"], files, instance, older_than=timedelta(0), step_outputs=outputs,
                      dry_run=True)
    assert sorted(planned.step_output_runs) == sorted(runs) and len(outputs.runs()) == 2
    done = collect(resources["virtual_files"], files, instance, older_than=timedelta(0), step_outputs=outputs)
    assert sorted(done.step_output_runs) == sorted(runs) and outputs.runs() == []
    assert done.to_json()["stepOutputs"] == {"removedRuns": done.step_output_runs, "keptRuns": 0}


def test_a_re_execution_keeps_what_its_parent_made(resources, files, env):
    """A re-execution from failure reads its parent's step outputs and their files, which it does not name:
    created but not finished (launched, queued, started), or failed recently (to be re-executed again), it
    lost them to gc once the parent was finished and older than the cutoff."""
    from connector_ops.ops.io_manager import StepOutputIOManager
    from connector_ops.resources.virtual_files.step_outputs import StepOutputs

    outputs = StepOutputs(env["CONNECTOR_OPS_DATABASE_URL"])
    instance = dg.DagsterInstance.ephemeral()
    pf = files.add_file(SALES).to_json()
    parent = run_job(push_and_pull, {**resources, "io_manager": StepOutputIOManager()}, instance, pf, fail=True)
    assert not parent.success
    made = outputs_of(parent) | {pf["id"]}  # the push's virtual file, and the file it read
    between = datetime.now(UTC)
    time.sleep(0.05)

    def gc(now: datetime) -> Any:
        return collect(resources["virtual_files"], files, instance, older_than=timedelta(0), now=now,
                       step_outputs=outputs, dry_run=True)

    for status in (dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.FAILURE):
        child = instance.create_run_for_job(push_and_pull, run_config={}, parent_run_id=parent.run_id,
                                            root_run_id=parent.run_id, status=status)
        grandchild = instance.create_run_for_job(push_and_pull, run_config={}, parent_run_id=child.run_id,
                                                 root_run_id=parent.run_id, status=status)
        # unfinished: whenever gc runs; failed: while the re-executions are recent
        now = datetime.now(UTC) + timedelta(days=8) if status != dg.DagsterRunStatus.FAILURE else between
        result = gc(now)
        assert not made & (set(result.virtual_files) | set(result.platform_files)), status
        assert parent.run_id not in result.step_output_runs, status
        instance.delete_run(grandchild.run_id)
        instance.delete_run(child.run_id)
    result = gc(datetime.now(UTC) + timedelta(days=8))  # nothing refers to the failed parent any more
    assert made <= set(result.virtual_files) | set(result.platform_files)
    assert result.step_output_runs == [parent.run_id]


def test_the_inputs_a_scheduled_pipeline_reads_stay(resources, files, env, tmp_path, monkeypatch):
    """A reference table read by a YAML pipeline through a literal virtualFileId (the job's default config: a
    scheduled run stores run config {}), through ${env.…}, or a literal platformFile, was removed by the
    default gc after the run: no run named it. Each step now records what it read."""
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    pf = files.add_file(SALES).to_json()
    literal, by_env, batched = (invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
                                for _ in range(3))
    source = files.add_file(SALES).to_json()
    monkeypatch.setenv("GC_REF_TABLE", by_env)
    monkeypatch.setenv("GC_BATCHED", batched)
    path = write(tmp_path, f"""
        name: nightly
        schedule: "0 6 * * *"
        steps:
          - id: literal
            action: etl.pull
            input: {{virtualFileId: "{literal}", exportType: csv, exportName: a.csv}}
          - id: by_env
            action: etl.query
            input: {{virtualFileId: "${{env.GC_REF_TABLE}}", query: {{region: North}}}}
          - id: batches
            foreach: {{virtualFileId: "${{env.GC_BATCHED}}", maxBatchSize: 50}}
            action: etl.iterate
            input: {{content: "${{batch.rows}}", maxBatchSize: 100}}
          - id: load
            action: etl.push
            input: {{platformFile: {json.dumps(source)}}}
        """)
    compiled = compile_pipeline(load_pipeline(path))
    instance = dg.DagsterInstance.ephemeral()
    request = compiled.schedule.evaluate_tick(dg.build_schedule_context(instance=instance)).run_requests[0]
    assert request.run_config == {}  # the literal inputs are the job's default config
    run = compiled.job.execute_in_process(run_config=request.run_config, instance=instance, resources=resources)
    assert run.success
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7),
                     now=datetime.now(UTC) + timedelta(days=8))
    vfs, pfs = inventory(resources)
    assert {literal, by_env, batched} <= vfs, result.virtual_files
    assert source["id"] in pfs and pf["id"] in result.platform_files  # what only the setup read goes


def test_what_a_recent_failed_run_read_stays(resources, files, env, tmp_path, monkeypatch):
    """A step records what it read when it fails too: a nightly run failing on a reference table given by
    ${env.…} (named in no run config) kept nothing, so gc removed the table its re-execution from failure
    reads again."""
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    table = invoke("etl.push", {"platformFile": files.add_file(SALES).to_json()}, resources)["virtualFileId"]
    monkeypatch.setenv("GC_FAILED_READ", table)
    monkeypatch.setenv("GC_DELIMITER", "too long")  # refused when the step runs, after it read its input
    path = write(tmp_path, """
        name: nightly_failing
        steps:
          - id: export
            action: etl.pull
            input: {virtualFileId: "${env.GC_FAILED_READ}", exportType: csv, exportName: a.csv,
                    parameters: {csvDelimiter: "${env.GC_DELIMITER}"}}
        """)
    time.sleep(0.05)
    cutoff = datetime.now(UTC)  # the table is older than this, the run newer
    instance = dg.DagsterInstance.ephemeral()
    run = compile_pipeline(load_pipeline(path)).job.execute_in_process(instance=instance, resources=resources,
                                                                      raise_on_error=False)
    assert not run.success
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(0), now=cutoff,
                     dry_run=True)
    assert table not in result.virtual_files
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(0),
                     now=datetime.now(UTC) + timedelta(days=1), dry_run=True)
    assert table in result.virtual_files  # once the failed run is old, nothing keeps it


def _as_written_before_reads_were_recorded(dagster_home: Path, run_id: str) -> None:
    """Rewrite a run's events in its SQLite event log as a connector-ops version before the ``reads_recorded``
    marker wrote them: without the marker and the read keys (those came with commit 6797436, the marker later;
    9828cee, the audit's old version, wrote neither). Only the metadata our steps add is removed."""
    import sqlite3

    gone = {"reads_recorded", "read_virtual_file_ids", "read_platform_files"}

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, list):
            return [strip(v) for v in value if not (isinstance(v, dict) and v.get("label") in gone)]
        return value

    with sqlite3.connect(dagster_home / "history" / "runs" / f"{run_id}.db") as db:
        rows = db.execute("SELECT id, event FROM event_logs").fetchall()
        changed = [(json.dumps(strip(json.loads(event))), row) for row, event in rows if "reads_recorded" in event]
        assert changed  # the run did record its reads: the marker was there to remove
        db.executemany("UPDATE event_logs SET event = ? WHERE id = ?", changed)


def test_a_run_made_before_reads_were_recorded_keeps_every_file_it_may_have_read(resources, files, env, tmp_path,
                                                                                  monkeypatch):
    """After an upgrade, a job's latest successful run was made by the old code, whose steps recorded nothing of
    what they read: gc removed the reference table it read through ${env.…}, as if the run read nothing. gc now
    keeps every file made before such a run ended, names the run, and weighs the job's files again once the
    job has run with this version."""
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    pf = files.add_file(SALES).to_json()
    table, stray = (invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"] for _ in range(2))
    monkeypatch.setenv("GC_OLD_REF", table)
    path = write(tmp_path, """
        name: nightly_upgraded
        schedule: "0 6 * * *"
        steps:
          - id: by_env
            action: etl.query
            input: {virtualFileId: "${env.GC_OLD_REF}", query: {region: North}}
        """)
    job = compile_pipeline(load_pipeline(path)).job
    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))
    old = job.execute_in_process(instance=instance, resources=resources)
    assert old.success
    _as_written_before_reads_were_recorded(tmp_path / "dagster", old.run_id)
    time.sleep(1.1)  # SQLite dates a virtual file to the second: one made in the run's last second is kept
    later = invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "later.csv").to_json()},
                   resources)["virtualFileId"]  # made after the old run ended: it cannot have read it

    weeks_later = datetime.now(UTC) + timedelta(days=8)
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7), now=weeks_later,
                     dry_run=True)
    assert table not in result.virtual_files and stray not in result.virtual_files
    assert pf["id"] not in result.platform_files and later in result.virtual_files
    assert [(run.job, run.run_id) for run in result.unweighed_runs] == [("nightly_upgraded", old.run_id)]
    assert result.to_json()["unweighedRuns"][0]["runId"] == old.run_id
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run"], env=env)
    assert said.exit_code == 0, said.output
    assert f"virtual file {table}" not in said.stdout and f"would remove virtual file {later}" in said.stdout
    assert (f"run {old.run_id} of job nightly_upgraded" in said.stderr
            and "Run the job once with this version" in said.stderr)

    assert job.execute_in_process(instance=instance, resources=resources).success  # once, with this version
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7), now=weeks_later)
    assert result.unweighed_runs == [] and result.to_json()["unweighedRuns"] == []
    assert stray in result.virtual_files and later in result.virtual_files
    assert table in {vf for vf, _ in resources["virtual_files"].inventory()}  # what the new run read stays


def test_a_removed_jobs_old_run_says_how_to_let_its_files_go(resources, files, env, tmp_path, monkeypatch):
    """A job removed from the code (or renamed) whose latest successful run was made before steps recorded their
    reads kept every older file for good, and gc's only advice — run the job once with this version — could
    not be followed. The warning names the way out: delete that run (its id in the command), and gc weighs
    those files again."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepOutputData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.execution.plan.outputs import StepOutputHandle

    pf = files.add_file(SALES).to_json()
    old = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    time.sleep(1.1)  # SQLite dates a virtual file to the second
    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))
    last = instance.add_run(dg.DagsterRun(job_name="legacy_report", status=dg.DagsterRunStatus.STARTED))
    output = StepOutputData(StepOutputHandle("s", "result"), metadata={"duration_s": dg.MetadataValue.float(1.0)})
    instance.store_event(EventLogEntry(  # as the old code's step wrote it: its duration, no reads_recorded
        error_info=None, level="DEBUG", user_message="", run_id=last.run_id, timestamp=time.time(),
        job_name="legacy_report", dagster_event=DagsterEvent(DagsterEventType.STEP_OUTPUT.value,
                                                             job_name="legacy_report", step_key="s",
                                                             event_specific_data=output)))
    instance.run_storage.handle_run_event(last.run_id, DagsterEvent(DagsterEventType.RUN_SUCCESS.value,
                                                                    job_name="legacy_report"), datetime.now(UTC))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster"))

    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run"], env=env)
    assert said.exit_code == 0, said.output
    assert f"virtual file {old}" not in said.stdout  # made before the run ended: kept
    assert "If the job no longer exists" in said.stderr and f"dagster run delete {last.run_id}" in said.stderr

    instance.delete_run(last.run_id)  # what the warning says
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run"], env=env)
    assert f"would remove virtual file {old}" in said.stdout and "warning" not in said.stderr


def test_an_unfinished_run_of_the_old_code_keeps_what_was_made_before_it_started(resources, files, tmp_path):
    """A run of the old code left STARTED by the upgrade (its run worker gone) is recent for as long as it is
    unfinished: gc kept every file for good, made before it or long after, and its advice — run the job once
    with this version — could not help. It keeps what was made before the run started (its own outputs, made
    since, its events name), and the warning says to terminate it if it is stuck."""
    from dagster._core.events import DagsterEvent, DagsterEventType, StepOutputData
    from dagster._core.events.log import EventLogEntry
    from dagster._core.execution.plan.outputs import StepOutputHandle
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    pf = files.add_file(SALES).to_json()
    before = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]
    time.sleep(1.1)  # SQLite dates a virtual file to the second
    (tmp_path / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(tmp_path / "dagster"))
    stuck = instance.add_run(DagsterRun(job_name="nightly_old", status=DagsterRunStatus.STARTED))
    output = StepOutputData(StepOutputHandle("by_env", "result"), metadata={"duration_s": dg.MetadataValue.float(1.0)})
    instance.store_event(EventLogEntry(  # as the old code's step wrote it: its duration, no reads_recorded
        error_info=None, level="DEBUG", user_message="", run_id=stuck.run_id, timestamp=time.time(),
        job_name="nightly_old", dagster_event=DagsterEvent(DagsterEventType.STEP_OUTPUT.value, job_name="nightly_old",
                                                           step_key="by_env", event_specific_data=output)))
    time.sleep(1.1)
    after = invoke("etl.push", {"platformFile": pf}, resources)["virtualFileId"]

    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7),
                     now=datetime.now(UTC) + timedelta(days=8), dry_run=True)
    assert before not in result.virtual_files and after in result.virtual_files
    (unweighed,) = result.to_json()["unweighedRuns"]
    assert unweighed["runId"] == stuck.run_id and unweighed["endedAt"] is None and unweighed["readsUntil"]


def test_a_file_a_step_stored_for_a_later_step_stays_for_its_re_execution(resources, files, env, tmp_path):
    """A ``${file:…}`` file is stored by its step's resolver, before the action step runs: a run failing (or
    killed) in between named it nowhere, so gc removed it while a re-execution from failure was queued, and
    the re-executed step failed with a 404. The resolver's output names what it stored."""
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    (tmp_path / "c.csv").write_text("id,name\n1,a\n")
    path = write(tmp_path, """
        name: stored_then_failed
        steps:
          - {id: first, action: etl.query, input: {virtualFileId: nowhere, query: {}}}
          - {id: load, action: etl.push, after: [first], input: {platformFile: "${file:c.csv}"}}
        """)
    instance = dg.DagsterInstance.ephemeral()
    before = {pf for pf, _ in files.inventory()}
    parent = compile_pipeline(load_pipeline(path)).job.execute_in_process(instance=instance, resources=resources,
                                                                         raise_on_error=False)
    assert not parent.success
    (stored,) = {pf for pf, _ in files.inventory()} - before
    queued = dict(parent_run_id=parent.run_id, root_run_id=parent.run_id, status=dg.DagsterRunStatus.NOT_STARTED)
    child = instance.create_run_for_job(compile_pipeline(load_pipeline(path)).job, run_config={}, **queued)
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7),
                     now=datetime.now(UTC) + timedelta(days=8), dry_run=True)
    assert stored not in result.platform_files
    instance.delete_run(child.run_id)
    result = collect(resources["virtual_files"], files, instance, older_than=timedelta(days=7),
                     now=datetime.now(UTC) + timedelta(days=8), dry_run=True)
    assert stored in result.platform_files  # nothing queued: an old failed run keeps nothing


def test_the_cli_collects_with_the_instance_of_dagster_home(tmp_path):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME"))}
    (tmp_path / "dagster").mkdir()
    env = {**clean, "CONNECTOR_OPS_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / "dagster")}
    script = str(Path(sys.executable).parent / "connector-ops")

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], capture_output=True, text=True, timeout=300, env=env)

    stray = json.loads(cli("files", "add", str(SALES)).stdout)
    for _ in range(2):
        assert cli("pipeline", "run", "sales_report").returncode == 0
    dry = cli("gc", "--older-than", "0s", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    assert planned["dryRun"] is True and planned["history"] is True
    assert stray["id"] in planned["platformFiles"]["removed"] and planned["virtualFiles"]["removed"]
    done = cli("gc", "--older-than", "0s")
    assert done.returncode == 0, done.stderr
    assert f"removed platform file {stray['id']}" in done.stdout
    assert done.stdout.strip().splitlines()[-1].startswith(
        f"removed {len(planned['virtualFiles']['removed'])} virtual file(s) and "
        f"{len(planned['platformFiles']['removed'])} platform file(s); kept ")
    again = json.loads(cli("gc", "--older-than", "0s", "--json").stdout)
    assert again["virtualFiles"]["removed"] == [] and again["platformFiles"]["removed"] == []
    assert cli("pipeline", "run", "sales_report").returncode == 0  # the kept files still serve a run


def test_gc_on_a_sqlite_file_that_does_not_exist_says_so(tmp_path):
    """A mistyped SQLite URL made a new empty store there, and gc reported nothing to collect (exit 0)."""
    typo = tmp_path / "typo" / "dir" / "vf.db"
    env = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{typo}"}
    script = str(Path(sys.executable).parent / "connector-ops")
    for args in (["--dry-run"], ["--older-than", "0s", "--json"]):
        said = subprocess.run([script, "gc", *args], capture_output=True, text=True, timeout=120,
                              env={**os.environ, **env})
        assert said.returncode == 3, said.stdout + said.stderr  # not found (connector-ops --help)
        assert f"failed (404): the virtual-file store's database {typo} does not exist" in said.stderr
        assert not (tmp_path / "typo").exists() and not (tmp_path / "home").exists()


@pytest.mark.parametrize("backend", ["local", "database"])
def test_gc_on_a_new_home_has_nothing_to_collect_and_creates_nothing(own_database_url, tmp_path, monkeypatch,
                                                                     backend):
    """A new user's first ``gc`` (or ``gc --dry-run``) exited 3, a 404 naming the home's virtual_files.db that
    no write had made yet; on a new PostgreSQL database a dry run created the store's tables. Nothing stored
    is nothing to collect (exit 0, said so), and gc leaves the home and the database as they were; the
    first write then makes a store gc sweeps as usual."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    env = {"CONNECTOR_OPS_HOME": str(home), "CONNECTOR_OPS_FILES_BACKEND": backend}
    if own_database_url.startswith("postgresql"):  # SQLite: the home's own database, the default
        env["CONNECTOR_OPS_DATABASE_URL"] = own_database_url

    def tables() -> list[str]:
        probe = sa.create_engine(own_database_url, poolclass=sa.pool.NullPool)
        try:
            with probe.connect() as conn:
                return sa.inspect(conn).get_table_names()
        finally:
            probe.dispose()

    for args in (["--dry-run"], ["--dry-run", "--json"], ["--older-than", "0s"]):
        said = CliRunner().invoke(gc_command, args, env=env)
        assert said.exit_code == 0, said.output
        if "--json" in args:
            assert json.loads(said.stdout)["stored"] is False
        else:
            assert said.stdout.startswith("nothing to collect: nothing was ever stored here yet (virtual files: ")
        assert not home.exists()
        if "CONNECTOR_OPS_DATABASE_URL" in env:
            assert tables() == []
    stores = resources_for(["platform_files", "virtual_files"], env)
    invoke("etl.push", {"platformFile": stores["platform_files"].add_bytes(b"a\n1\n", "one.csv").to_json()}, stores)
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run", "--json"], env=env)
    assert said.exit_code == 0, said.output
    planned = json.loads(said.stdout)
    assert planned["stored"] is True
    assert len(planned["virtualFiles"]["removed"]) == 1 and len(planned["platformFiles"]["removed"]) == 1


def _rows_csv(path: Path, rows: int) -> Path:
    path.write_text("id,city,note\n" + "".join(f"{i},City-{i % 997:04d},note {i} of the stray file\n"
                                               for i in range(rows)), encoding="utf-8")
    return path


def test_gc_gives_back_the_disk_space_of_what_it_dropped(database_url, tmp_path):
    """SQLite kept a dropped table's pages in its file, and its log as long as the longest write: the store
    never shrank. gc now compacts it when free pages are a quarter of it or more; PostgreSQL gives the space
    back as it drops."""
    resources = resources_on(database_url, tmp_path / "home")
    files, store = resources["platform_files"], resources["virtual_files"]
    stray = files.add_file(_rows_csv(tmp_path / "stray.csv", 150_000)).to_json()
    for _ in range(3):
        invoke("etl.push", {"platformFile": stray}, resources)
    cutoff = datetime.now(UTC)
    time.sleep(1.1)  # the catalog dates a file to the second
    keeper = invoke("etl.push", {"platformFile": files.add_bytes(b"id\n1\n2\n", "k.csv").to_json()},
                    resources)["virtualFileId"]
    assert collect(store, files, None, older_than=timedelta(0), now=cutoff, dry_run=True).compaction is None
    done = collect(store, files, None, older_than=timedelta(0), now=cutoff)
    if database_url.startswith("sqlite"):
        path = Path(database_url.removeprefix("sqlite:///"))
        log = path.with_name(path.name + "-wal")
        assert done.compaction is not None and not done.compaction.busy
        assert done.compaction.after == path.stat().st_size + (log.stat().st_size if log.exists() else 0)
        assert done.compaction.after < done.compaction.before / 20  # ≈ 47 MiB of file and log → a few pages
    else:
        assert done.compaction is None
    assert len(done.virtual_files) == 3
    assert invoke("etl.iterate", {"content": keeper, "maxBatchSize": 5}, resources)["content"] == [{"id": "1"},
                                                                                                   {"id": "2"}]
    again = collect(store, files, None, older_than=timedelta(0), now=cutoff)
    assert again.compaction is None and again.to_json()["compaction"] is None
    if database_url.startswith("sqlite"):  # the command says what it gave back
        stray = files.add_file(tmp_path / "stray.csv").to_json()  # gc removed the first one
        pushed = [invoke("etl.push", {"platformFile": stray}, resources)["virtualFileId"] for _ in range(3)]
        for vf_id in pushed:  # dropped before gc: the dry run has their free pages to foresee
            store.drop(vf_id)
        env = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": database_url}
        dry = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run", "--json"], env=env)
        assert dry.exit_code == 0, dry.output
        said = CliRunner().invoke(gc_command, ["--older-than", "0s"], env=env)
        assert said.exit_code == 0, said.output
        # the dry run foresaw what the real one gave back: its estimate counted the log the checkpoint empties
        foreseen = json.loads(dry.stdout)["compaction"]["bytesAfter"]
        done_after = re.search(r"^compacted the SQLite database: .* -> ([\d.]+) MiB on disk$", said.stdout, re.M)
        assert done_after and abs(foreseen / (1 << 20) - float(done_after[1])) <= 0.1, (foreseen, said.stdout)
        assert re.search(r"^compacted the SQLite database: [\d.]+ MiB -> 0\.\d MiB on disk$", said.stdout, re.M)


def test_a_dry_run_leaves_a_killed_writers_leftovers_where_they_are(tmp_path):
    """``gc --dry-run`` removed a killed Pull's ``.tmp-<pid>-…`` file (unlocked, older than a minute): the
    platform-file store's start sweeps such leftovers, and the dry run started it. It now changes nothing;
    the real run removes them, even within the hour after a start swept (a start sweeps once an hour)."""
    env = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"),
           "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'vf.db'}"}
    stores = resources_for(["platform_files", "virtual_files"], env)
    files = stores["platform_files"]
    invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "one.csv").to_json()}, stores)
    leftover = Path(files.files_dir) / ".tmp-999999-killed"
    leftover.write_bytes(b"half a pull")
    os.utime(leftover, (time.time() - 120, time.time() - 120))
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--dry-run", "--json"], env=env)
    assert said.exit_code == 0, said.output
    assert len(json.loads(said.stdout)["platformFiles"]["removed"]) == 1
    listed = set(os.listdir(files.files_dir)) - {SWEPT_STAMP}  # the stamp of the last sweep, just now
    assert leftover.exists() and len(listed) == 3  # the file, its descriptor, the leftover
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--json"], env=env)
    assert said.exit_code == 0, said.output
    assert os.listdir(files.files_dir) == [SWEPT_STAMP]  # swept by gc, however recently a start did


def _array_positions(url: str) -> dict[str, tuple[int, datetime | None]]:
    from connector_ops.resources.virtual_files.catalog import array_cursor

    probe = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with probe.connect() as conn:
            return {d: (p, t) for d, p, t in conn.execute(sa.select(array_cursor)).all()}
    finally:
        probe.dispose()


def test_inline_array_positions_not_moved_since_the_cutoff_are_removed(resources, database_url, tmp_path):
    """Each inline array read only in part (a sensor looking at the first page of each tick's list) left its
    Iterate position in the store for good, which gc never removed. A position is now dated each time it
    moves; gc removes those not moved since its cutoff, says how many (``--json``: ``arrayPositions``), and
    an Iterate over such an array starts again at its first item."""
    from connector_ops.resources.virtual_files.array_cursors import digest_of
    from connector_ops.resources.virtual_files.catalog import array_cursor

    idle, busy = [{"id": f"idle-{i}"} for i in range(6)], [{"id": f"busy-{i}"} for i in range(6)]
    for items in (idle, busy):
        assert invoke("etl.iterate", {"content": items, "maxBatchSize": 2}, resources)["content"] == items[:2]
    positions = _array_positions(database_url)
    assert {p for p, _ in positions.values()} == {2} and all(t is not None for _, t in positions.values())
    probe = sa.create_engine(database_url, poolclass=sa.pool.NullPool)
    with probe.begin() as conn:  # idle: last moved two days ago
        conn.execute(sa.update(array_cursor).where(array_cursor.c.digest == digest_of(idle))
                     .values(moved_at=datetime.now(UTC) - timedelta(days=2)))
    probe.dispose()
    store, files = resources["virtual_files"], resources["platform_files"]
    planned = collect(store, files, None, older_than=timedelta(days=1), dry_run=True)
    assert (planned.array_positions, planned.kept_array_positions) == (1, 1)
    assert len(_array_positions(database_url)) == 2
    env = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": database_url}
    said = CliRunner().invoke(gc_command, ["--older-than", "1d", "--json"], env=env)
    assert said.exit_code == 0, said.output
    assert json.loads(said.stdout)["arrayPositions"] == {"removed": 1, "kept": 1}
    assert set(_array_positions(database_url)) == {digest_of(busy)}
    assert invoke("etl.iterate", {"content": idle, "maxBatchSize": 2}, resources)["content"] == idle[:2]
    assert invoke("etl.iterate", {"content": busy, "maxBatchSize": 2}, resources)["content"] == busy[2:4]
    said = CliRunner().invoke(gc_command, ["--older-than", "0s"], env=env)
    assert "removed 2 inline-array Iterate position(s) not moved since the cutoff; kept 0" in said.stdout


def test_a_store_holding_only_inline_array_positions_is_collected(own_database_url, tmp_path):
    """Before layout 2 an inline array's Iterate made ``cop_array_cursor`` by itself: a store where only such
    Iterates ran had no catalog, and gc said nothing was ever stored there. Its positions now count; the
    upgrade dates them at its own time (their age is unknown), so a later gc removes them."""
    url = own_database_url
    probe = sa.create_engine(url, poolclass=sa.pool.NullPool)
    with probe.begin() as conn:  # what array_cursors made before layout 2
        conn.exec_driver_sql("CREATE TABLE cop_array_cursor (digest VARCHAR(64) NOT NULL PRIMARY KEY, "
                             "position BIGINT NOT NULL)")
        conn.exec_driver_sql("INSERT INTO cop_array_cursor VALUES ('d1', 5), ('d2', 7)")
    probe.dispose()
    env = {"CONNECTOR_OPS_HOME": str(tmp_path / "home"), "CONNECTOR_OPS_DATABASE_URL": url}
    said = CliRunner().invoke(gc_command, ["--older-than", "1h", "--json"], env=env)
    assert said.exit_code == 0, said.output
    first = json.loads(said.stdout)
    assert first["stored"] is True and first["arrayPositions"] == {"removed": 0, "kept": 2}
    assert {d: p for d, (p, _) in _array_positions(url).items()} == {"d1": 5, "d2": 7}
    said = CliRunner().invoke(gc_command, ["--older-than", "0s", "--json"], env=env)
    assert json.loads(said.stdout)["arrayPositions"] == {"removed": 2, "kept": 0}
