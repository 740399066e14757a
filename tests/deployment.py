"""A whole deployment on loopback, as deploy/ describes it: a PostgreSQL-backed instance (deploy/dagster.yaml as
shipped but for run monitoring's poll), a code server, dagster-webserver, dagster-daemon, Redis and Celery
workers, each a real process.

Services the suite needs but cannot start are skipped locally and fail under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.system_packages import require_programs

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DONE = {"SUCCESS", "FAILURE", "CANCELED"}
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  ... on RunConfigValidationInvalid { errors { message } } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status startTime endTime } } }"""


def missing(what: str) -> None:
    """A service that cannot start: a failure under ``CI=true``, a skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{what} (CI=true: deployment tests must run)")
    pytest.skip(what)


def graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    response = httpx.post(f"{url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
    response.raise_for_status()
    body = response.json()
    assert "errors" not in body, body["errors"]
    return body["data"]


def wait_for(check: Callable[[], bool], what: str, timeout: float, procs: Sequence[Process] = (),
             interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        for proc in procs:
            proc.assert_alive()
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(interval)


class Process:
    """A long-running server in its own process group (its children stop with it); output in a log file."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], logs: Path, cwd: Path = ROOT) -> None:
        self.name = name
        self.log_path = logs / f"{name}.log"
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(args, cwd=cwd, env=dict(env), stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self._terminated = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"{self.name} exited ({self.proc.returncode}):\n{self.log()[-4000:]}"

    def terminate(self) -> None:
        """Ask the server to stop (SIGTERM to its group, once) without waiting: :meth:`stop` waits."""
        if self.proc.poll() is None and not self._terminated:
            self._terminated = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - only if the server hangs
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):  # grandchildren left in the group (run workers)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._log.close()


def create_database(server_url: str) -> tuple[str, Callable[[], None]]:
    """A fresh database on the test server for a Dagster instance: its psycopg2 URL and a function dropping it."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(server_url)
    name = f"dagster_{uuid.uuid4().hex[:12]}"
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')

    def drop() -> None:
        with psycopg.connect(libpq, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return url.set(drivername="postgresql+psycopg2", database=name).render_as_string(hide_password=False), drop


def redis_server(port: int, logs: Path, env: Mapping[str, str]) -> Process:
    exe = require_programs({"redis-server": "redis-server"}, ("redis-server",))["redis-server"]
    proc = Process("redis", [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                   env, logs)
    import socket

    def answers() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_for(answers, "redis-server answers PING", 30, [proc])
    return proc


class Deployment:
    """The processes of deploy/Procfile on loopback, sharing one environment and one ``DAGSTER_HOME``."""

    def __init__(self, env: dict[str, str], logs: Path, procs: list[Process], url: str) -> None:
        self.env, self.logs, self.procs, self.url = env, logs, procs, url
        self.homes: dict[str, Path] = {}  # CONNECTOR_OPS_HOME of each code location
        self.locations: Mapping[str, Mapping[str, str]] = {}  # the extra environment of each code location

    def launch(self, job: str, location: str, run_config: dict[str, Any] | None = None) -> str:
        """Launch ``job`` of ``location`` as the UI's launchpad does (its default config unless given)."""
        selector = {"repositoryLocationName": location, "repositoryName": "__repository__", "jobName": job}
        params = {"selector": selector, "runConfigData": run_config or {}}
        launched = graphql(self.url, LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        return launched["run"]["runId"]

    def wait(self, run_id: str, timeout: float = 300) -> dict[str, Any]:
        """The run's status, start and end once it is done (asserts it ends within ``timeout``)."""
        result: dict[str, Any] = {}

        def done() -> bool:
            result.update(graphql(self.url, STATUS, {"id": run_id})["runOrError"])
            return result.get("status") in DONE

        wait_for(done, f"run {run_id} done", timeout, self.procs)
        return result

    def instance(self) -> Any:
        """The deployment's Dagster instance, opened in the test process (for event logs)."""
        import dagster as dg

        old = os.environ.get("DAGSTER_PG_URL")
        os.environ["DAGSTER_PG_URL"] = self.env["DAGSTER_PG_URL"]
        try:
            return dg.DagsterInstance.from_config(self.env["DAGSTER_HOME"])
        finally:
            if old is None:
                del os.environ["DAGSTER_PG_URL"]
            else:
                os.environ["DAGSTER_PG_URL"] = old

    def add(self, proc: Process) -> Process:
        self.procs.append(proc)
        return proc


def workspace_yaml(ports: Mapping[str, int]) -> str:
    """deploy/workspace.yaml's one gRPC location, repeated per code server of the test (host and port set)."""
    shipped = (ROOT / "deploy" / "workspace.yaml").read_text()
    entry = shipped[shipped.index("  - grpc_server:"):]
    return "load_from:\n" + "".join(
        entry.replace("host: code-server", "host: 127.0.0.1").replace("port: 4000", f"port: {port}")
        .replace("location_name: connector_ops", f"location_name: {name}") for name, port in ports.items())


#: run monitoring's poll in the tests' instance, in place of the 30 s deploy/dagster.yaml ships: the test of a
#: dead run worker otherwise waits up to a whole poll (15 s on average) for the daemon's next look
MONITORING_POLL_SECONDS = 2
SHIPPED_POLL = "  poll_interval_seconds: 30\n"


def instance_yaml(monitoring_poll: int = MONITORING_POLL_SECONDS) -> str:
    """deploy/dagster.yaml as shipped, but for run monitoring's poll (every other setting as a user gets it)."""
    shipped = (ROOT / "deploy" / "dagster.yaml").read_text()
    assert shipped.count(SHIPPED_POLL) == 1, "deploy/dagster.yaml's run_monitoring poll changed: update the tests"
    return shipped.replace(SHIPPED_POLL, f"  poll_interval_seconds: {monitoring_poll}\n")


@contextlib.contextmanager
def deployment(base: Path, env: Mapping[str, str], locations: Mapping[str, Mapping[str, str]],
               free_port: Callable[[], int]) -> Iterator[Deployment]:
    """Code servers (one per location, each with its own extra environment), a webserver and the daemon on a
    PostgreSQL instance built from deploy/dagster.yaml as shipped (run monitoring polling faster:
    :func:`instance_yaml`)."""
    home = base / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text(instance_yaml())
    ports = {name: free_port() for name in locations}
    workspace = base / "workspace.yaml"
    workspace.write_text(workspace_yaml(ports))
    web_port = free_port()
    full_env = {**os.environ, **env, "DAGSTER_HOME": str(home)}
    procs: list[Process] = []
    logs = base / "logs"
    logs.mkdir()
    try:
        for name, extra in locations.items():
            procs.append(Process(f"code-server-{name}", [
                str(BIN / "dagster"), "code-server", "start", "-m", "connector_ops.pipelines", "-h", "127.0.0.1",
                "-p", str(ports[name]), "--location-name", name], {**full_env, **extra}, logs))
        url = f"http://127.0.0.1:{web_port}"
        procs.append(Process("webserver", [str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1",
                                           "-p", str(web_port)], full_env, logs))
        procs.append(Process("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], full_env, logs))
        deployment = Deployment(full_env, logs, procs, url)

        def loaded() -> bool:
            data = graphql(url, "{ repositoriesOrError { __typename ... on RepositoryConnection { nodes { name } } } }")
            return len(data["repositoriesOrError"].get("nodes", [])) == len(locations)

        wait_for(loaded, "the webserver serves every code location", 180, procs)
        yield deployment
    finally:
        # the servers wind down at once (a code server takes seconds to drain its gRPC calls; one after
        # another, the fifteen processes of test_deployment.py took 90 s to stop on a loaded machine); Redis
        # last, so that no Celery worker's warm shutdown finds its broker gone
        last = [proc for proc in procs if proc.name == "redis"]
        for wave in ([proc for proc in reversed(procs) if proc not in last], last):
            for proc in wave:
                proc.terminate()
            for proc in wave:
                proc.stop()
