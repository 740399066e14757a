"""WatchedRunLauncher's check of run workers (connector_ops.pipelines.run_workers), on a real Dagster instance
and real processes: it fails only a run whose recorded run worker is gone from this host — not a run that has
ended, not a run worker on another host or in another pid namespace, and a reused pid does not hide a death.
The whole path (the daemon's run monitoring, a code server killed with its run worker) is in
tests/test_deployment.py."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import dagster as dg
import pytest
from dagster._core.launcher import WorkerStatus
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

from connector_ops.pipelines.run_workers import TAG, RunWorker, WatchedRunLauncher, _stat


@pytest.fixture
def launcher() -> Iterator[WatchedRunLauncher]:
    with dg.DagsterInstance.ephemeral() as instance:
        launcher = WatchedRunLauncher()
        launcher.register_instance(instance)
        yield launcher


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


RUN_ID = str(uuid.uuid4())


def record_of(proc: subprocess.Popen[bytes]) -> RunWorker:
    here = RunWorker.this_process(RUN_ID)
    stat = _stat(proc.pid)
    assert stat is not None
    return dataclasses.replace(here, pid=proc.pid, started=stat[1])


def add_run(launcher: WatchedRunLauncher, worker: RunWorker | None,
            status: DagsterRunStatus = DagsterRunStatus.STARTED, run_id: str | None = None) -> DagsterRun:
    """A run of its own id (``worker``'s record made its own) unless ``run_id`` is given."""
    run_id = run_id or str(uuid.uuid4())
    tags = {TAG: json.dumps(dataclasses.asdict(dataclasses.replace(worker, run_id=run_id)))} if worker else {}
    return launcher._instance.add_run(DagsterRun(job_name="job", run_id=run_id, status=status, tags=tags))


def test_a_live_run_worker_is_running(launcher: WatchedRunLauncher, worker: subprocess.Popen[bytes]) -> None:
    run = add_run(launcher, record_of(worker))
    assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING


def test_a_killed_run_worker_fails_its_run_naming_pid_and_host(launcher: WatchedRunLauncher,
                                                               worker: subprocess.Popen[bytes]) -> None:
    record = record_of(worker)
    run = add_run(launcher, record)
    worker.kill()
    worker.wait()
    result = launcher.check_run_worker_health(run)
    assert result.status == WorkerStatus.FAILED
    assert f"(pid {record.pid} on host {record.host}) is gone" in (result.msg or "")
    assert "Re-execute the run from failure" in (result.msg or "")


def test_an_unreaped_run_worker_counts_as_gone(launcher: WatchedRunLauncher, worker: subprocess.Popen[bytes]) -> None:
    """A killed run worker whose parent has not reaped it yet (a zombie) still answers kill(pid, 0)."""
    run = add_run(launcher, record_of(worker))
    worker.kill()
    deadline = time.monotonic() + 5
    while (_stat(worker.pid) or ("?",))[0] != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert launcher.check_run_worker_health(run).status == WorkerStatus.FAILED


def test_a_reused_pid_does_not_hide_a_death(launcher: WatchedRunLauncher, worker: subprocess.Popen[bytes]) -> None:
    """The pid lives, but its process started at another time than the one recorded: another process."""
    record = dataclasses.replace(record_of(worker), started="1")
    assert launcher.check_run_worker_health(add_run(launcher, record)).status == WorkerStatus.FAILED


def test_a_run_worker_elsewhere_is_not_checked(launcher: WatchedRunLauncher) -> None:
    """A pid of another host or pid namespace means nothing here: such a run is left running."""
    gone = dataclasses.replace(RunWorker.this_process(RUN_ID), pid=2**22 + 1)  # above any pid_max: no such process here
    for record in (dataclasses.replace(gone, host="another-host"),
                   dataclasses.replace(gone, pid_namespace="pid:[1]")):
        result = launcher.check_run_worker_health(add_run(launcher, record))
        assert result.status == WorkerStatus.RUNNING and "not checked" in (result.msg or "")
    assert launcher.check_run_worker_health(add_run(launcher, gone)).status == WorkerStatus.FAILED


def test_a_run_that_ended_meanwhile_is_not_failed(launcher: WatchedRunLauncher) -> None:
    """The monitor read the run STARTED; by the check its run worker has ended it and exited."""
    gone = dataclasses.replace(RunWorker.this_process(RUN_ID), pid=2**22 + 1)
    run = add_run(launcher, gone)
    launcher._instance.handle_run_event(run.run_id, dg.DagsterEvent(
        event_type_value="PIPELINE_SUCCESS", job_name="job", message="done"))
    assert launcher.check_run_worker_health(run).status == WorkerStatus.SUCCESS


def test_a_run_without_a_record_is_not_checked(launcher: WatchedRunLauncher) -> None:
    result = launcher.check_run_worker_health(add_run(launcher, None))
    assert result.status == WorkerStatus.RUNNING


def test_a_record_copied_from_a_parent_run_is_not_checked(launcher: WatchedRunLauncher) -> None:
    """A re-execution inherits its parent's tags, the parent's (dead) run worker among them, until its own run
    worker records itself: that record is not the re-execution's run worker."""
    parent = dataclasses.replace(RunWorker.this_process(RUN_ID), pid=2**22 + 1)
    tags = {TAG: json.dumps(dataclasses.asdict(parent))}
    child = launcher._instance.add_run(DagsterRun(job_name="job", run_id=str(uuid.uuid4()),
                                                  status=DagsterRunStatus.STARTED, tags=tags))
    assert launcher.check_run_worker_health(child).status == WorkerStatus.RUNNING


def test_a_run_worker_hidden_by_proc_counts_as_alive() -> None:
    """A daemon of another user than its run workers, with ``/proc`` mounted ``hidepid=2`` (systemd's
    ``ProtectProc=invisible``, a common hardening): the run worker's ``/proc`` entry is hidden from it, and a
    hidden entry was taken for a dead process — every STARTED run would have failed within a poll. A hidden entry
    is asked with ``kill(pid, 0)`` instead: ``EPERM``, another user's process, alive. (Its own mount namespace,
    so the host's ``/proc`` is untouched; the check runs as uid 1, the run worker as uid 65534.)"""
    import textwrap

    check = textwrap.dedent("""
        import dataclasses, os, subprocess
        from connector_ops.pipelines.run_workers import RunWorker, _stat
        worker = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
        record = dataclasses.replace(RunWorker.this_process("r"), pid=worker.pid, started=_stat(worker.pid)[1])
        print(worker.pid, flush=True)
        os.setgroups([]); os.setgid(1); os.setuid(1)  # the daemon's user: /proc hides the worker from it now
        print(_stat(worker.pid) is None, record.visible_here(), record.gone(), flush=True)
    """)
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                           'mount -t proc -o hidepid=2 proc /proc && exec "$0" -c "$1"', sys.executable, check],
                          capture_output=True, text=True, timeout=60)
    lines = done.stdout.split("\n")
    if lines[0].strip().isdigit():
        subprocess.run(["kill", lines[0].strip()], check=False)
    assert done.returncode == 0, done.stderr
    assert lines[1] == "True True False", done.stdout  # hidden from the checker, on its host, and not gone
