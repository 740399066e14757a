"""The deployment of docs/deployment.md, run for real on loopback: deploy/dagster.yaml as shipped (PostgreSQL
storage, queued runs, at most 4 at a time; only run monitoring polls every 2 s here, not 30), code servers,
dagster-webserver and dagster-daemon; runs launched through GraphQL as the UI's launchpad does, schedules and
sensors ticked by the daemon, steps on two Celery workers over Redis.

Four code locations load the same module with different environments (each its own ``CONNECTOR_OPS_HOME``):
``connector_ops`` (the defaults: in-process executor, virtual files on PostgreSQL), ``on_sqlite`` (virtual files
on SQLite), ``on_celery`` (``CONNECTOR_OPS_EXECUTOR=celery``; the workers share its environment) and
``two_hosts`` (Celery with everything in PostgreSQL, one worker on a "second host" that sees none of our disk);
``on_prefork`` and ``on_lost`` have a broker of their own for a worker of their own; ``on_doomed`` is a code
server the test of a dead run worker kills.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deployment import (
    BIN,
    Deployment,
    Process,
    create_database,
    deployment,
    graphql,
    missing,
    redis_server,
    wait_for,
)
from tests.servers import free_port
from tests.store_activity import joining, orphans, writing
from tests.test_pipelines_sales_report import INVALID_ROWS, SALES_ROWS, TEST_ROWS

pytestmark = pytest.mark.postgres
REPORT_ROWS = SALES_ROWS - INVALID_ROWS - TEST_ROWS
EVERY_MINUTE = """name: minutely
description: A schedule the daemon ticks within a minute
schedule: "* * * * *"
steps:
  - id: load
    action: etl.push
    input:
      platformFile: "${file:customers.csv}"
"""

#: a Join that fans out (every row has the same key): 225M output rows, minutes of work on either database
LONG_JOIN = """name: long_join
description: A Join of minutes, for the test of Terminate
steps:
  - {id: left, action: etl.push, input: {platformFile: "${file:fanout.csv}"}}
  - {id: right, action: etl.push, input: {platformFile: "${file:fanout.csv}"}}
  - id: join
    action: etl.join
    input:
      join:
        left: {virtualFileId: "${left.virtualFileId}", customId: L, key: k}
        right: {virtualFileId: "${right.virtualFileId}", customId: R, key: k}
"""
FANOUT_ROWS = 15_000
#: the Join of the test of a frozen worker: seconds of work, which the server finishes while the worker is frozen
SHORT_JOIN = LONG_JOIN.replace("long_join", "short_join").replace("fanout.csv", "fanout_short.csv")
SHORT_FANOUT_ROWS = 3_000
#: CONNECTOR_OPS_CELERY_LOST_AFTER of the location whose worker the tests kill or freeze: twice the smallest
#: allowed, so that a Terminate that waits two missed beats (~4 s, 8.5 s once on a loaded machine) stays
#: clearly apart from one that waits out the limit
LOST_AFTER = 20
#: a pipeline the test of stale workers edits after the workers loaded it: it pushes another file then
EDITED = """name: edited
description: Edited after the Celery workers started
steps:
  - {id: load, action: etl.push, input: {platformFile: "${file:%s}"}}
"""
RELOAD = """mutation($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) { __typename
  ... on WorkspaceLocationEntry { locationOrLoadError { __typename ... on PythonError { message } } } } }"""
TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename
  ... on TerminateRunFailure { message } ... on PythonError { message } } }"""


@pytest.fixture(scope="module")
def deployed(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One deployment for the module: its processes take a while to start."""
    try:
        import dagster_celery  # noqa: F401
        import dagster_postgres  # noqa: F401
    except ImportError as exc:
        missing(f"the postgres/celery extras are not installed: {exc}")
    base = tmp_path_factory.mktemp("deployment")
    extra_pipelines = base / "pipelines"
    extra_pipelines.mkdir()
    (extra_pipelines / "minutely.yaml").write_text(EVERY_MINUTE)
    (extra_pipelines / "customers.csv").write_text("id,name\n1,Ada\n2,Grace\n")
    (extra_pipelines / "edited.yaml").write_text(EDITED % "customers.csv")
    (extra_pipelines / "long_join.yaml").write_text(LONG_JOIN)
    (extra_pipelines / "fanout.csv").write_text("k,v\n" + "".join(f"k,{i}\n" for i in range(FANOUT_ROWS)))
    (extra_pipelines / "short_join.yaml").write_text(SHORT_JOIN)
    (extra_pipelines / "fanout_short.csv").write_text(
        "k,v\n" + "".join(f"k,{i}\n" for i in range(SHORT_FANOUT_ROWS)))
    pg_url, drop = create_database(postgres_url)
    redis_port = free_port()
    env = {  # the webserver, the daemon and the Celery workers
        "DAGSTER_PG_URL": pg_url,
        "DAGSTER_MAX_CONCURRENT_RUNS": "4",
        "CONNECTOR_OPS_HOME": str(base / "home_celery"),
        "CONNECTOR_OPS_DATABASE_URL": postgres_url,
        "CONNECTOR_OPS_PIPELINES_DIR": str(extra_pipelines),
        "CONNECTOR_OPS_EXECUTOR": "celery",
        "CONNECTOR_OPS_SHARED_STORAGE": "true",  # the workers are on this host: they share its folders
        "CONNECTOR_OPS_CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "CONNECTOR_OPS_CELERY_BACKEND_URL": f"redis://127.0.0.1:{redis_port}/1",
    }
    locations = {
        "connector_ops": {"CONNECTOR_OPS_EXECUTOR": "", "CONNECTOR_OPS_HOME": str(base / "home_default")},
        "on_sqlite": {"CONNECTOR_OPS_EXECUTOR": "", "CONNECTOR_OPS_HOME": str(base / "home_sqlite"),
                      "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{base / 'home_sqlite' / 'vf.db'}"},
        "on_celery": {},
        # Celery's default pool, each step in a child process of one worker: its own broker, so only that worker
        "on_prefork": {"CONNECTOR_OPS_CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/4",
                       "CONNECTOR_OPS_CELERY_BACKEND_URL": f"redis://127.0.0.1:{redis_port}/5"},
        # a worker of its own that the test of a lost worker kills, and a small limit for the loss
        "on_lost": {"CONNECTOR_OPS_CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/6",
                    "CONNECTOR_OPS_CELERY_BACKEND_URL": f"redis://127.0.0.1:{redis_port}/7",
                    "CONNECTOR_OPS_CELERY_LOST_AFTER": str(LOST_AFTER)},
        # a code server that the test of a dead run worker kills with its run worker (as a container killed whole)
        "on_doomed": {"CONNECTOR_OPS_EXECUTOR": "", "CONNECTOR_OPS_HOME": str(base / "home_doomed")},
        # steps on two hosts that share nothing on disk: the database holds virtual files, platform files and
        # step outputs; its own broker, so only its two workers (one "far", see below) take its steps
        "two_hosts": {"CONNECTOR_OPS_HOME": str(base / "home_two_hosts"), "CONNECTOR_OPS_FILES_BACKEND": "database",
                      "CONNECTOR_OPS_SHARED_STORAGE": "false",
                      "CONNECTOR_OPS_CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_port}/2",
                      "CONNECTOR_OPS_CELERY_BACKEND_URL": f"redis://127.0.0.1:{redis_port}/3"},
    }
    try:
        with deployment(base, env, locations, free_port) as d:
            d.add(redis_server(redis_port, d.logs, d.env))
            d.homes = {name: Path(extra.get("CONNECTOR_OPS_HOME", env["CONNECTOR_OPS_HOME"]))
                       for name, extra in locations.items()}
            d.locations = locations
            yield d
    finally:
        drop()


def outbox_messages(home: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text())["Messages"][0] for p in sorted((home / "outbox").glob("*.json"))]


def assert_report(message: dict[str, Any]) -> None:
    """A sales_report mail: the report (header + every kept order) and the rejects attached."""
    attachments = {a["Filename"]: base64.b64decode(a["Base64Content"]).decode() for a in message["Attachments"]}
    assert list(attachments) == ["sales_report.csv", "rejected_sales.csv"]
    assert len(attachments["sales_report.csv"].splitlines()) == 1 + REPORT_ROWS
    assert len(attachments["rejected_sales.csv"].splitlines()) == 1 + INVALID_ROWS


def run_sales_reports(d: Deployment, location: str, count: int) -> list[dict[str, Any]]:
    """Launch ``count`` sales_report runs at once; each must succeed and mail a correct report. Their status,
    start and end (epoch seconds), and ``seconds`` from the launch to their end seen here."""
    home = d.homes[location]
    before = len(outbox_messages(home))
    started = time.monotonic()
    run_ids = [d.launch("sales_report", location) for _ in range(count)]
    results = []
    for run_id in run_ids:
        result = d.wait(run_id)
        assert result["status"] == "SUCCESS", f"{run_id}: {result}"
        results.append({**result, "seconds": time.monotonic() - started})
    messages = outbox_messages(home)
    assert len(messages) == before + count
    for message in messages[before:]:
        assert_report(message)
    return results


def most_at_once(runs: list[dict[str, Any]]) -> int:
    """How many of the runs were in progress at the same moment, at most (by their start and end times)."""
    return max(sum(other["startTime"] <= run["startTime"] < other["endTime"] for other in runs) for run in runs)


def test_ui_launch_with_the_default_executor(deployed: Deployment) -> None:
    (run,) = run_sales_reports(deployed, "connector_ops", 1)
    print(f"\nsales_report, default (in-process) executor, PostgreSQL instance: {run['seconds']:.1f} s to SUCCESS")


@pytest.mark.parametrize("location", ["connector_ops", "on_sqlite"])
def test_four_concurrent_runs(deployed: Deployment, location: str) -> None:
    """Four runs at once (the deployment allows 4): they must also have been in progress together, not queued
    one after another (all would succeed at a concurrency of 1 as well)."""
    runs = run_sales_reports(deployed, location, 4)
    overlapping = most_at_once(runs)
    assert overlapping >= 2, [(run["startTime"], run["endTime"]) for run in runs]
    print(f"\n4 concurrent sales_report runs ({location}): all done in {max(r['seconds'] for r in runs):.1f} s, "
          f"at most {overlapping} at once")


def worker_command(*options: str) -> list[str]:
    """A Celery worker as deploy/Procfile starts one; ``options`` name it and set its pool."""
    return [str(BIN / "celery"), "-A", "connector_ops.pipelines.celery_app", "worker", "-Q", "dagster", "-l", "INFO",
            "--prefetch-multiplier=1", "--without-heartbeat", "--without-gossip", "--without-mingle", *options]


def celery_workers(d: Deployment, count: int) -> list[Process]:
    """``count`` workers as deploy/Procfile starts them (started once per module)."""
    existing = [p for p in d.procs if p.name.startswith("worker")]
    if existing:
        return existing
    workers = [d.add(Process(f"worker{i}", worker_command("--pool=solo", "-n", f"worker{i}@%h"), d.env, d.logs))
               for i in range(1, count + 1)]
    wait_for(lambda: all("ready." in w.log() for w in workers), "Celery workers ready", 120, workers)
    return workers


def prefork_worker(d: Deployment) -> Process:
    """One worker of the pool docs/deployment.md offers beside ``solo``: ``--pool=prefork -c 2`` (started once)."""
    existing = [p for p in d.procs if p.name == "prefork"]
    if existing:
        return existing[0]
    worker = d.add(Process("prefork", worker_command("--pool=prefork", "-c", "2", "-n", "prefork@%h"),
                           {**d.env, **d.locations["on_prefork"]}, d.logs))
    wait_for(lambda: "ready." in worker.log(), "the prefork worker ready", 120, [worker])
    return worker


def sales_report_nodes() -> list[str]:
    """The steps of one sales_report run (no fan-out): the job's nodes."""
    from connector_ops.pipelines.definitions import build_definitions

    return [n.name for n in build_definitions().get_job_def("sales_report").graph.nodes]


def steps_per_worker(d: Deployment, run_id: str) -> Counter[str]:
    """How many steps of the run each Celery worker executed (from the run's engine events)."""
    with d.instance() as instance:
        return Counter(
            event.dagster_event.engine_event_data.metadata["Celery worker"].value
            for event in instance.all_logs(run_id)
            if event.dagster_event and event.dagster_event.is_engine_event
            and "Celery worker" in (event.dagster_event.engine_event_data.metadata or {}))


def test_celery_splits_sales_report_between_two_workers(deployed: Deployment) -> None:
    celery_workers(deployed, 2)
    (run,) = run_sales_reports(deployed, "on_celery", 1)
    with deployed.instance() as instance:
        (last,) = instance.get_run_records(limit=1)
        run_id = last.dagster_run.run_id
    hosts = steps_per_worker(deployed, run_id)
    assert sorted(h.split("@")[0] for h in hosts) == ["worker1", "worker2"], hosts
    assert sum(hosts.values()) == len(sales_report_nodes()), hosts  # every step ran, on one worker or the other
    print(f"\nsales_report on 2 Celery workers (cold): {run['seconds']:.1f} s; steps {dict(hosts)}")


def test_celery_runs_foreach_batches_on_both_workers(deployed: Deployment) -> None:
    celery_workers(deployed, 2)
    run_id = deployed.launch("sales_batches", "on_celery")
    assert deployed.wait(run_id)["status"] == "SUCCESS"
    hosts = steps_per_worker(deployed, run_id)
    assert len(hosts) == 2, hosts
    with deployed.instance() as instance:
        mapped = {e.step_key for e in instance.all_logs(run_id)
                  if e.dagster_event and e.dagster_event.event_type_value == "STEP_SUCCESS"
                  and e.step_key.startswith("check[")}
    assert len(mapped) == -(-SALES_ROWS // 50), mapped  # one validate step per batch of 50 rows


def test_a_prefork_worker_runs_two_reports_at_once(deployed: Deployment) -> None:
    """Each step in a child process the worker forked before any step ran: the children open their own
    database sessions and Definitions, and two runs' steps go on side by side."""
    worker = prefork_worker(deployed)
    runs = run_sales_reports(deployed, "on_prefork", 2)
    assert most_at_once(runs) == 2, [(run["startTime"], run["endTime"]) for run in runs]
    with deployed.instance() as instance:
        run_ids = [r.dagster_run.run_id for r in instance.get_run_records(limit=2)]
    for run_id in run_ids:
        hosts = steps_per_worker(deployed, run_id)
        assert list(hosts) == [next(iter(hosts))] and next(iter(hosts)).startswith("prefork@"), hosts
        assert sum(hosts.values()) == len(sales_report_nodes()), hosts
    worker.assert_alive()
    assert "WorkerLostError" not in worker.log(), worker.log()[-3000:]
    print(f"\n2 sales_report runs on one prefork worker (-c 2): {max(run['seconds'] for run in runs):.1f} s")


def test_celery_workers_refuse_a_step_of_a_pipeline_edited_since_they_started(deployed: Deployment) -> None:
    """The auditor's scenario: a pipeline file edited and its code location reloaded, while the workers keep
    the version they loaded when they started. A run of the new version fails at its first step, with the
    file and what to do (restart the workers), instead of running the old steps and ending SUCCESS."""
    from connector_ops.ops.factory import error_of_failed_step

    workers = {w.name for w in celery_workers(deployed, 2)}
    loaded: set[str] = set()  # a worker builds the Definitions at its first step: every worker runs one first
    for _ in range(8):
        run_id = deployed.launch("edited", "on_celery")
        assert deployed.wait(run_id)["status"] == "SUCCESS"
        loaded |= {host.split("@")[0] for host in steps_per_worker(deployed, run_id)}
        if loaded == workers:
            break
    assert loaded == workers
    folder = Path(deployed.env["CONNECTOR_OPS_PIPELINES_DIR"])
    (folder / "five.csv").write_text("id,name\n1,a\n2,b\n3,c\n4,d\n5,e\n")
    (folder / "edited.yaml").write_text(EDITED % "five.csv")
    reloaded = graphql(deployed.url, RELOAD, {"name": "on_celery"})["reloadRepositoryLocation"]
    assert reloaded["locationOrLoadError"]["__typename"] == "RepositoryLocation", reloaded
    run_id = deployed.launch("edited", "on_celery")
    assert deployed.wait(run_id)["status"] == "FAILURE"
    with deployed.instance() as instance:
        events = [e.dagster_event for e in instance.all_logs(run_id) if e.dagster_event]
    assert not [e for e in events if e.event_type_value == "STEP_SUCCESS"]  # the old push did not run
    failed = [e for e in events if e.event_type_value == "STEP_FAILURE"]
    assert [e.step_key for e in failed] == ["load__input"], failed
    error = error_of_failed_step(failed[0])
    assert error.status == 409 and str(folder / "edited.yaml") in error.message, error
    assert "Restart the processes that run steps (the Celery workers" in error.message


#: per kind of instigator: its start mutation, selector argument and type, result type and state field, stop mutation
INSTIGATORS = {
    "schedule": ("startSchedule", "scheduleSelector", "ScheduleSelector", "ScheduleStateResult", "scheduleState",
                 "stopRunningSchedule"),
    "sensor": ("startSensor", "sensorSelector", "SensorSelector", "Sensor", "sensorState", "stopSensor"),
}


def start_instigator(d: Deployment, kind: str, name: str) -> str:
    """Start the schedule or sensor ``name`` of the location ``connector_ops`` as the UI's toggle does; the id of
    its state, which :func:`stop_instigator` takes."""
    mutation, argument, selector, result, state, _ = INSTIGATORS[kind]
    started = graphql(d.url, f"""mutation($s: {selector}!) {{ {mutation}({argument}: $s) {{ __typename
      ... on {result} {{ {state} {{ id }} }} ... on PythonError {{ message }} }} }}""", {"s": {
        "repositoryLocationName": "connector_ops", "repositoryName": "__repository__", f"{kind}Name": name}})
    assert started[mutation]["__typename"] == result, started
    return started[mutation][state]["id"]


def stop_instigator(d: Deployment, kind: str, state_id: str) -> None:
    mutation = INSTIGATORS[kind][-1]
    stopped = graphql(d.url, f"""mutation($id: String!) {{ {mutation}(id: $id) {{ __typename
      ... on PythonError {{ message }} }} }}""", {"id": state_id})
    assert stopped[mutation]["__typename"] != "PythonError", stopped


def test_daemon_ticks_a_schedule_and_a_sensor(deployed: Deployment) -> None:
    """The daemon ticks a YAML pipeline's schedule and the Drive inbox sensor, each launching its run. Both are
    stopped at the end: left running, the schedule would push a file into the store every minute, under the
    feet of the later tests that count what the store holds."""
    from connector_ops.environment import resources_for
    from connector_ops.session import invoke

    home = deployed.homes["connector_ops"]
    location_env = {"CONNECTOR_OPS_HOME": str(home),
                    "CONNECTOR_OPS_DATABASE_URL": deployed.env["CONNECTOR_OPS_DATABASE_URL"]}
    resources = resources_for(environ=location_env)
    pf = resources["platform_files"].add_bytes(b"id,name\n1,Ada\n", "inbox.csv", "text/csv").to_json()
    file_id = invoke("drive.upload_file", {"platformFile": pf}, resources)["fileId"]

    def runs_of(job: str) -> list[Any]:
        with deployed.instance() as instance:
            import dagster as dg

            return instance.get_run_records(dg.RunsFilter(job_name=job))

    with contextlib.ExitStack() as running:
        for kind, name in [("schedule", "minutely_schedule"), ("sensor", "drive_inbox_on_new_file")]:
            running.callback(stop_instigator, deployed, kind, start_instigator(deployed, kind, name))
        wait_for(lambda: any(r.dagster_run.status.value == "SUCCESS" for r in runs_of("drive_inbox")),
                 "the sensor's run succeeded", 120, deployed.procs)
        (sensor_run,) = runs_of("drive_inbox")
        assert sensor_run.dagster_run.tags["dagster/run_key"].endswith(f"/{file_id}@1")
        wait_for(lambda: any(r.dagster_run.status.value == "SUCCESS" for r in runs_of("minutely")),
                 "the schedule's run succeeded", 150, deployed.procs)
        assert runs_of("minutely")[0].dagster_run.tags["dagster/schedule_name"] == "minutely_schedule"


def test_the_daemon_monitors_runs(deployed: Deployment) -> None:
    """deploy/dagster.yaml turns run monitoring on: the daemon fails runs stuck STARTING and terminates runs past
    their dagster/max_runtime tag (docs/deployment.md). Its monitoring daemon runs and beats."""
    def beats() -> bool:
        with deployed.instance() as instance:
            return instance.run_monitoring_enabled and "MONITORING" in instance.get_daemon_heartbeats()

    wait_for(beats, "the run monitoring daemon's heartbeat", 90, deployed.procs)


def test_a_second_host_runs_its_share_of_the_steps(deployed: Deployment,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    """A worker on a "second host": its own home, Dagster home and pipeline folder, and a private mount
    namespace where a tmpfs hides the whole deployment folder (every other home, the instance's storage).
    Steps of one run split between it and a worker beside the code server; the outputs are exact."""
    import pickle
    import shutil

    import sqlalchemy as sa

    from connector_ops.environment import resources_for
    from connector_ops.pipelines.definitions import build_definitions
    from connector_ops.resources.virtual_files.catalog import step_output
    from connector_ops.resources.virtual_files.engines import get_engine

    unshare = shutil.which("unshare")
    assert unshare, "util-linux's unshare is needed for the second-host worker"
    extra = deployed.locations["two_hosts"]
    base = deployed.logs.parent
    far = tmp_path_factory.mktemp("second-host")
    (far / "dagster_home").mkdir()
    shutil.copy(Path(deployed.env["DAGSTER_HOME"]) / "dagster.yaml", far / "dagster_home" / "dagster.yaml")
    shutil.copytree(deployed.env["CONNECTOR_OPS_PIPELINES_DIR"], far / "pipelines")
    far_env = {**deployed.env, **extra, "CONNECTOR_OPS_HOME": str(far / "home"),
               "DAGSTER_HOME": str(far / "dagster_home"), "CONNECTOR_OPS_PIPELINES_DIR": str(far / "pipelines")}
    worker = worker_command("--pool=solo")
    hidden = f'mount -t tmpfs tmpfs "{base}" && test ! -e "{deployed.env["DAGSTER_HOME"]}" && exec "$@"'
    workers = [
        deployed.add(Process("near", [*worker, "-n", "near@%h"], {**deployed.env, **extra}, deployed.logs)),
        deployed.add(Process("far", [unshare, "--mount", "sh", "-c", hidden, "sh", *worker, "-n", "far@%h"],
                             far_env, deployed.logs)),
    ]
    wait_for(lambda: all("ready." in w.log() for w in workers), "near and far workers ready", 120, workers)

    run_id = deployed.launch("sales_batches", "two_hosts")
    result = deployed.wait(run_id)
    assert result["status"] == "SUCCESS", f"{result}\n{workers[1].log()[-3000:]}"
    hosts = steps_per_worker(deployed, run_id)
    assert sorted(h.split("@")[0] for h in hosts) == ["far", "near"], hosts

    # every output as an in-process run of the same job computes it (validation of each batch)
    database = deployed.env["CONNECTOR_OPS_DATABASE_URL"]
    with get_engine(database).begin() as conn:
        kept = dict(conn.execute(sa.select(step_output.c.key, step_output.c.value)
                                 .where(step_output.c.run_id == run_id)).all())
    local_env = {"CONNECTOR_OPS_HOME": str(far / "local"), "CONNECTOR_OPS_DATABASE_URL": database,
                 "CONNECTOR_OPS_FILES_BACKEND": "database"}
    local = build_definitions().get_job_def("sales_batches").execute_in_process(
        resources=resources_for(environ=local_env))
    compared = 0
    for event in local.all_events:
        if event.event_type_value == "STEP_OUTPUT" and event.step_key.startswith("check["):
            name, mapping_key = event.step_output_data.output_name, event.step_key[len("check["):-1]
            value = pickle.loads(kept[f"{run_id}/{event.step_key}/{name}"])
            assert value == local.output_for_node("check", name)[mapping_key], event.step_key
            compared += 1
    assert compared >= 5
    assert not (far / "home" / "files").exists() or not any((far / "home" / "files").iterdir())
    print(f"\nsales_batches on a near and a far worker: steps {dict(hosts)}")


@pytest.mark.parametrize("location", ["connector_ops", "on_sqlite", "on_celery", "on_prefork"])
def test_terminate_in_the_ui_stops_a_long_join_at_once(deployed: Deployment, location: str, postgres_url: str) -> None:
    """The UI's Terminate on a run whose step is inside one long SQL statement: the run worker's interrupt
    stops the statement (SQLite: our progress handler; PostgreSQL: a cancel in the server, which psycopg does
    not send for Dagster's exception), so the run is CANCELED within seconds, the server runs nothing more of
    it, and no table is left without its catalog entry. On Celery the step runs on a worker (``--pool=solo``,
    or a child process of a ``--pool=prefork`` worker), which Dagster's revoke does not stop: the worker's
    watch of the run interrupts it the same way, and the step ends without success."""
    workers = {"on_celery": lambda: celery_workers(deployed, 2),
               "on_prefork": lambda: [prefork_worker(deployed)]}.get(location, list)()
    url = deployed.locations[location].get("CONNECTOR_OPS_DATABASE_URL", postgres_url)
    run_id = deployed.launch("long_join", location)
    wait_for(joining(url), "the Join's statement", 120, deployed.procs)
    terminated = graphql(deployed.url, TERMINATE, {"id": run_id})["terminateRun"]
    assert terminated["__typename"] == "TerminateRunSuccess", terminated
    sent = time.monotonic()
    result = deployed.wait(run_id, timeout=180)
    took = time.monotonic() - sent
    assert result["status"] == "CANCELED", result
    assert took < 20, f"CANCELED {took:.1f} s after Terminate"
    wait_for(lambda: not writing(url), "the end of the Join's writing", 10)
    assert not orphans(url)
    with deployed.instance() as instance:
        kinds = [(e.step_key, e.dagster_event.event_type_value) for e in instance.all_logs(run_id) if e.dagster_event]
    join_events = [kind for step, kind in kinds if step == "join"]
    assert "STEP_SUCCESS" not in join_events and "STEP_OUTPUT" not in join_events, join_events
    after = [kind for step, kind in kinds[kinds.index((None, "PIPELINE_CANCELED")):] if step]
    assert set(after) <= {"STEP_FAILURE"}, kinds  # at most an interrupted Celery step's own failure, late
    for worker in workers:  # the interrupt stopped the step, not the worker
        worker.assert_alive()
        assert "shutdown" not in worker.log().lower(), worker.log()[-3000:]
        assert "WorkerLostError" not in worker.log(), worker.log()[-3000:]  # nor a prefork child
    print(f"\nlong_join ({location}) terminated: CANCELED {took:.1f} s after Terminate")


def lost_worker(d: Deployment, name: str, pool: str) -> Process:
    """A worker of its own for the location ``on_lost`` (its own broker: only it takes that location's steps),
    which a test kills or freezes, ready."""
    # -c 1: two steps at once in threads of one process deadlocked once in Dagster's logging setup (one
    # thread's logging.config.dictConfig against another's handler lock), before either step's own work
    worker = Process(name, worker_command(f"--pool={pool}", "-c", "1", "-n", f"{name}@%h"),
                     {**d.env, **d.locations["on_lost"]}, d.logs)
    wait_for(lambda: "ready." in worker.log(), f"the {name} worker ready", 120, [worker])
    return worker


def heartbeat(d: Deployment, run_id: str, step: str) -> dict[str, Any]:
    """The heartbeat of the running task of ``step`` (location ``on_lost``), as its worker last wrote it, with
    its task id."""
    import redis

    from connector_ops.pipelines.celery_heartbeat import HEARTBEAT_STATE

    results = redis.Redis.from_url(d.locations["on_lost"]["CONNECTOR_OPS_CELERY_BACKEND_URL"])
    metas = [json.loads(results.get(key) or "{}") for key in results.scan_iter("celery-task-meta-*")]
    (beat,) = [{**m["result"], "task_id": m["task_id"]} for m in metas if m.get("status") == HEARTBEAT_STATE
               and m["result"]["run_id"] == run_id and m["result"]["step"] == step]
    return beat


@pytest.mark.parametrize("pool", ["solo", "threads"])
def test_a_step_whose_worker_is_killed_fails_its_run(deployed: Deployment, postgres_url: str, pool: str) -> None:
    """A worker SIGKILLed in the middle of a long Join (its own worker, on its own broker: the others stay
    up; with either pool the step runs in the worker's process, in its main thread or another): its
    heartbeat stops, and after ``CONNECTOR_OPS_CELERY_LOST_AFTER`` the run worker fails the step,
    naming it and the worker, so the run ends ``FAILURE`` instead of staying ``STARTED``; the Join's
    statement stopped and rolled back."""
    from connector_ops.pipelines.celery_heartbeat import HEARTBEAT_SECONDS

    worker = lost_worker(deployed, "doomed", pool)
    try:
        run_id = deployed.launch("long_join", "on_lost")
        wait_for(joining(postgres_url), "the Join's statement", 120, [*deployed.procs, worker])
        beat = heartbeat(deployed, run_id, "join")
        assert beat["pid"] == worker.proc.pid and beat["hostname"].startswith("doomed@"), beat
        os.kill(beat["pid"], signal.SIGKILL)
        killed = time.monotonic()
        result = deployed.wait(run_id, timeout=LOST_AFTER + 60)
        took = time.monotonic() - killed
        assert result["status"] == "FAILURE", result
        # the limit runs from the last beat, written up to a period before the kill
        assert LOST_AFTER - HEARTBEAT_SECONDS <= took < LOST_AFTER + 20, f"FAILURE {took:.1f} s after the kill"
        wait_for(lambda: not writing(postgres_url), "the end of the Join's writing", 15)
        assert not orphans(postgres_url)
        with deployed.instance() as instance:
            failures = [e.dagster_event.event_specific_data.error for e in instance.all_logs(run_id)
                        if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"]
        (error,) = failures
        text = error.to_string()
        assert f'Step "join" was lost: its Celery worker {beat["hostname"]} (pid {beat["pid"]})' in text, text
        assert "probably died" in text and "rolled back" in text and "from failure" in text, text
    finally:
        worker.stop()
    print(f"\nlong_join's worker ({pool}) killed: FAILURE {took:.1f} s after the kill (limit {LOST_AFTER} s)")


def catalogued(url: str) -> dict[str, str]:
    """The virtual files the store's catalog holds: id → when it was made (a failure then says which is new)."""
    import sqlalchemy as sa

    from connector_ops.resources.virtual_files.engines import get_engine

    with get_engine(url).connect() as conn:
        return {vf: str(made) for vf, made in conn.execute(sa.text("SELECT id, created_at FROM cop_virtual_file"))}


@pytest.mark.parametrize("pool", ["solo", "threads"])
def test_a_frozen_worker_that_resumes_after_its_run_failed_commits_nothing(
        deployed: Deployment, postgres_url: str, pool: str) -> None:
    """A worker SIGSTOPped in the middle of a Join (a paused VM, a stall) past CONNECTOR_OPS_CELERY_LOST_AFTER:
    the run fails the step as lost. The server finishes the Join's statement meanwhile; then the worker is
    SIGCONTed, and its step would go on to commit the Join's output after the run failed (a re-execution from
    failure would then have made it twice). Its fence refuses the commit (under ``threads`` the only guard:
    no interrupt there; under ``solo`` the watch may interrupt the step first): no file, no table, no step
    output, and the step says why in the run's log and the worker's."""
    import sqlalchemy as sa

    from connector_ops.pipelines.celery_fence import lost_tag
    from connector_ops.resources.virtual_files.catalog import step_output
    from connector_ops.resources.virtual_files.engines import get_engine

    worker = lost_worker(deployed, f"frozen_{pool}", pool)
    stopped = False
    try:
        run_id = deployed.launch("short_join", "on_lost")
        wait_for(joining(postgres_url), "the Join's statement", 120, [*deployed.procs, worker])
        beat = heartbeat(deployed, run_id, "join")
        files = catalogued(postgres_url)  # left and right are in
        os.kill(beat["pid"], signal.SIGSTOP)
        stopped = True
        result = deployed.wait(run_id, timeout=LOST_AFTER + 60)
        assert result["status"] == "FAILURE", result
        wait_for(lambda: not writing(postgres_url), "the Join's statement done in the server", 180)
        os.kill(beat["pid"], signal.SIGCONT)
        stopped = False
        wait_for(lambda: "without committing" in worker.log(), "the step's word that it stopped", 60, [worker])
        time.sleep(2)  # anything it would still do
        assert catalogued(postgres_url) == files
        assert not orphans(postgres_url)
        with get_engine(postgres_url).connect() as conn:
            outputs = conn.execute(sa.select(step_output.c.key).where(step_output.c.run_id == run_id)).scalars()
            assert not [key for key in outputs if "/join/" in key]
        with deployed.instance() as instance:
            run = instance.get_run_by_id(run_id)
            events = [e for e in instance.all_logs(run_id) if e.dagster_event and e.step_key == "join"]
        assert run.tags.get(lost_tag(beat["task_id"])) == "join", run.tags
        kinds = [e.dagster_event.event_type_value for e in events]
        assert "STEP_SUCCESS" not in kinds and "STEP_OUTPUT" not in kinds, kinds
        (stop,) = [e.message for e in events if "without committing" in (e.message or "")]
        assert 'step "join" of run' in stop and "declared it lost" in stop, stop
        worker.assert_alive()
    finally:
        if stopped:
            os.kill(beat["pid"], signal.SIGCONT)
        worker.stop()
    print(f"\nshort_join's worker ({pool}) frozen past the limit and resumed: nothing committed")


def test_terminate_does_not_wait_for_the_lost_limit(deployed: Deployment, postgres_url: str) -> None:
    """Terminate on a run whose step's worker was just killed: the run worker does not wait out
    CONNECTOR_OPS_CELERY_LOST_AFTER (no worker answers the revoke of a task in its heartbeat state) but two
    missed beats, and the run is CANCELED (the step, were it alive, could commit nothing: its run is not in
    progress)."""
    from connector_ops.pipelines.celery_heartbeat import HEARTBEAT_SECONDS, TERMINATING_LOST_AFTER

    worker = lost_worker(deployed, "terminated", "solo")
    try:
        run_id = deployed.launch("long_join", "on_lost")
        wait_for(joining(postgres_url), "the Join's statement", 120, [*deployed.procs, worker])
        os.kill(heartbeat(deployed, run_id, "join")["pid"], signal.SIGKILL)
        terminated = graphql(deployed.url, TERMINATE, {"id": run_id})["terminateRun"]
        assert terminated["__typename"] == "TerminateRunSuccess", terminated
        sent = time.monotonic()
        result = deployed.wait(run_id, timeout=LOST_AFTER + 60)
        took = time.monotonic() - sent
        assert result["status"] == "CANCELED", result
        # waiting out the limit would take at least LOST_AFTER - HEARTBEAT_SECONDS (18 s) from the kill
        assert took < TERMINATING_LOST_AFTER + 8 < LOST_AFTER - HEARTBEAT_SECONDS, f"CANCELED {took:.1f} s after"
        wait_for(lambda: not writing(postgres_url), "the end of the Join's writing", 15)
        assert not orphans(postgres_url)
    finally:
        worker.stop()
    print(f"\nlong_join's worker killed, then Terminate: CANCELED {took:.1f} s after (limit {LOST_AFTER} s)")


def run_worker_pid(d: Deployment, run_id: str) -> int:
    """The pid of the run's run worker, from Dagster's ENGINE_EVENT "Started process for run (pid: …)"."""
    with d.instance() as instance:
        (pid,) = [int(e.dagster_event.engine_event_data.metadata["pid"].value) for e in instance.all_logs(run_id)
                  if e.dagster_event and e.dagster_event.event_type_value == "ENGINE_EVENT"
                  and (e.message or "").startswith("Started process for run")]
    return pid


def test_a_run_whose_run_worker_dies_with_its_code_server_fails(deployed: Deployment, postgres_url: str) -> None:
    """A code server SIGKILLed with its run worker in the middle of a long Join (a container or unit killed
    whole, as a cgroup's OOM kill does): nobody is left to end the run, which stayed ``STARTED`` for good,
    holding its queue slot. The daemon's run monitoring asks our run launcher about the run worker it
    recorded, and fails the run within its poll (30 s as shipped, 2 s here) with a message naming the pid and
    the host and what to do; the Join's statement stopped and rolled back. (A run worker killed alone is failed
    at once by its code server: Dagster's own check.)"""
    import socket

    code_server = next(p for p in deployed.procs if p.name == "code-server-on_doomed")
    run_id = deployed.launch("long_join", "on_doomed")
    wait_for(joining(postgres_url), "the Join's statement", 120, deployed.procs)
    pid = run_worker_pid(deployed, run_id)
    assert os.getpgid(pid) == code_server.proc.pid  # a child of the code server, in its process group
    deployed.procs.remove(code_server)  # its death is the point: the other processes must stay up
    os.killpg(code_server.proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    code_server.stop()
    result = deployed.wait(run_id, timeout=90)
    took = time.monotonic() - killed
    assert result["status"] == "FAILURE", result
    wait_for(lambda: not writing(postgres_url), "the end of the Join's writing", 15)
    assert not orphans(postgres_url)
    with deployed.instance() as instance:
        failures = [e.message or "" for e in instance.all_logs(run_id)
                    if e.dagster_event and e.dagster_event.event_type_value == "PIPELINE_FAILURE"]
    (message,) = failures
    assert f"The run worker of this run (pid {pid} on host {socket.gethostname()}) is gone" in message, message
    assert "OOM killer" in message and "Re-execute the run from failure" in message, message
    print(f"\nlong_join's run worker killed with its code server: FAILURE {took:.1f} s after the kill")
