"""Interrupting a long action where users do: Ctrl-C at the command line, and Jupyter's Stop in a real
kernel, on both databases (Dagster's Terminate, the same SIGINT in a run worker, is tested with the
deployment in ``test_deployment.py``). The action stops within seconds instead of running to its end,
leaves no file behind, and the session goes on.

The long action is a Join that fans out: every row of both files has the same key, so the output has
``FANOUT²`` rows, more than 30 s of work on either database. The signal is sent once the Join's statement
runs (:func:`joining`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from connector_ops import invoke
from connector_ops.kernel.deferred import interrupts_deferred
from connector_ops.resources.virtual_files.core import StoreCore
from connector_ops.resources.virtual_files.engines import WRITE, get_engine, is_writing
from tests.deployment import wait_for
from tests.signals import Stop, stopped_as_entered, stopping
from tests.store_activity import joining, open_snapshots, row_tables, writing

FANOUT = 10_000
#: how long an interrupted action may take to stop; the uninterrupted Join takes far longer
PROMPT = 10.0
SCRIPT = str(Path(sys.executable).parent / "connector-ops")


def fanout_files(files: Any) -> list[str]:
    text = "k,v\n" + "".join(f"k,{i}\n" for i in range(FANOUT))
    return [invoke("etl.push", {"platformFile": files.add_bytes(text.encode(), name).to_json()})["virtualFileId"]
            for name in ("left.csv", "right.csv")]


def join_of(left: str, right: str) -> dict[str, Any]:
    return {"join": {"left": {"virtualFileId": left, "customId": "L", "key": "k"},
                     "right": {"virtualFileId": right, "customId": "R", "key": "k"}}}


def stored(url: str) -> tuple[set[str], set[str]]:
    """The virtual files in the catalog, and the row tables in the database."""
    with get_engine(url).connect() as conn:
        ids = set(conn.execute(sa.text("SELECT id FROM cop_virtual_file")).scalars())
    return ids, row_tables(url)


def soon(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    wait_for(check, what, seconds, interval=0.01)


def after(seconds: float) -> Callable[[], bool]:
    """True from ``seconds`` from now on."""
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() >= deadline


def assert_nothing_left(url: str, before: tuple[set[str], set[str]]) -> None:
    """The Join's files are gone with its transaction, and its statement with them (PostgreSQL's server
    stops it: psycopg cancels it)."""
    soon(lambda: not writing(url), "the end of the Join's writing", PROMPT)
    assert stored(url) == before


def long_join_pipeline(folder: Path, left: str, right: str) -> Path:
    """A pipeline whose first step is the long Join, and whose second step needs its output."""
    path = folder / "long_join.yaml"
    path.write_text(json.dumps({"name": "long_join", "steps": [
        {"id": "join", "action": "etl.join", "input": join_of(left, right)},
        {"id": "count", "action": "etl.iterate", "input": {"content": "${join.virtualFileId}", "maxBatchSize": 1}},
    ]}))
    return path


def ctrl_c(args: list[str], env: dict[str, str], running: Callable[[], bool], signo: int = signal.SIGINT
           ) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run the command, press Ctrl-C (or send ``signo``) once ``running()``; what it did, and how long it took
    to end after."""
    child = subprocess.Popen([SCRIPT, *args], env={**os.environ, **env}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        soon(running, "the long statement")
        assert child.poll() is None, "the command ended before the test could interrupt it"
        child.send_signal(signo)
        sent = time.monotonic()
        out, err = child.communicate(timeout=60)
        return subprocess.CompletedProcess(args, child.returncode, out, err), time.monotonic() - sent
    finally:
        child.kill()


@pytest.mark.parametrize(("signo", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_a_long_join_at_the_command_line(env, files, database_url, tmp_path, signo, expected):
    """SIGTERM stops it as Ctrl-C does, but exits 143 (it was 130, the same as Ctrl-C's)."""
    left, right = fanout_files(files)
    before = stored(database_url)
    (tmp_path / "join.json").write_text(json.dumps(join_of(left, right)))
    done, took = ctrl_c(["invoke", "etl.join", f"@{tmp_path / 'join.json'}"], env, joining(database_url), signo)
    assert took < PROMPT, f"stopped {took:.1f} s after the signal"
    assert done.returncode == expected and "Aborted!" in done.stderr and done.stdout == "", done
    assert "Traceback" not in done.stderr
    assert_nothing_left(database_url, before)
    assert invoke("etl.query", {"virtualFileId": left, "query": {"v": "7"}})["result"] == [{"k": "k", "v": "7"}]


def test_ctrl_c_stops_a_long_regex_query_at_the_command_line(env, files, database_url, tmp_path):
    """200 ``$regex`` under ``$or`` on 100k rows: SQLite calls the matcher 20M times in one statement, so the
    signal may reach it inside the function (on PostgreSQL the matches are found in Python). The Query
    alone runs for more than 20 s on either database; Ctrl-C comes 4 s after the command starts (≈ 1 s)."""
    text = "k,v\n" + "".join(f"k,value {i}\n" for i in range(100_000))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(text.encode(), "values.csv").to_json()})["virtualFileId"]
    (tmp_path / "query.json").write_text(json.dumps(
        {"virtualFileId": vf, "query": {"$or": [{"v": {"$regex": f"^x{i}y$"}} for i in range(200)]}}))
    done, took = ctrl_c(["invoke", "etl.query", f"@{tmp_path / 'query.json'}"], env, after(4))
    assert took < PROMPT, f"stopped {took:.1f} s after Ctrl-C"
    assert done.returncode == 130 and "Aborted!" in done.stderr and done.stdout == "", done
    assert "Traceback" not in done.stderr and "500" not in done.stderr, done


@pytest.mark.parametrize(("signo", "expected"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_a_pipeline_run_and_says_so(env, files, database_url, tmp_path, signo, expected):
    """``connector-ops pipeline run`` (a Dagster run, whose interrupt is Dagster's own exception): the step
    is reported interrupted, not failed, the step after it not run, and the exit status is the shell's for
    the signal: 130 for Ctrl-C, 143 for SIGTERM (it was 130 too, taken by Dagster's own SIGINT handler while
    the run executes, so a supervisor could not tell its stop from an interrupt). On PostgreSQL the server
    stops the statement too (psycopg alone cancels only on ``KeyboardInterrupt``)."""
    left, right = fanout_files(files)
    before = stored(database_url)
    done, took = ctrl_c(["pipeline", "run", str(long_join_pipeline(tmp_path, left, right))], env,
                        joining(database_url), signo)
    assert took < PROMPT, f"stopped {took:.1f} s after the signal"
    assert done.returncode == expected, done
    assert "interrupted: join stopped before the end" in done.stderr and "not run: count" in done.stderr, done
    assert "failed" not in done.stderr and "Traceback" not in done.stderr, done
    assert_nothing_left(database_url, before)


@contextlib.contextmanager
def kernel(env: dict[str, str], loaded: str = "") -> Iterator[tuple[Any, Any]]:
    """A new Jupyter kernel with ``%load_ext connector_ops`` done, ``(manager, client)``; ``loaded``: code
    that must pass right after it."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
    try:
        works(client, f"%load_ext connector_ops\n{loaded}")
        yield manager, client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def works(client: Any, code: str) -> None:
    reply = client.execute_interactive(code, timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]


def stop(manager: Any, client: Any, code: str, running: Callable[[], bool]) -> tuple[str, float]:
    """Run the cell and press Stop once ``running()``; the request's id, and when Stop was pressed."""
    started = client.execute(code)
    soon(running, "the long statement")
    manager.interrupt_kernel()
    return started, time.monotonic()


def handled(client: Any, msg_id: str) -> None:
    """Until the kernel is done with request ``msg_id`` and idle again (it drops requests that come while it
    winds an error down). Its idle status is what ends the wait, not its reply: ipykernel publishes the
    status after every request, but sends no reply to a cell when the Stop lands in its own code around the
    cell's (before the code runs, or in the flush of stdout before the reply): it catches that
    ``KeyboardInterrupt`` at its top level ("KeyboardInterrupt caught in kernel.") and goes on."""
    while not ((msg := client.get_iopub_msg(timeout=60))["msg_type"] == "status"
               and msg["parent_header"].get("msg_id") == msg_id and msg["content"]["execution_state"] == "idle"):
        pass


def stop_cell(manager: Any, client: Any, code: str, running: Callable[[], bool]) -> tuple[dict[str, Any], float]:
    """Run the cell, press Stop once ``running()`` (in the cell's code: a long statement); its reply, how
    long after the Stop that came, once the kernel is idle again."""
    started, sent = stop(manager, client, code, running)
    reply = client.get_shell_msg(timeout=60)
    took = time.monotonic() - sent
    assert reply["parent_header"]["msg_id"] == started
    handled(client, started)
    return reply, took


def test_jupyters_stop_stops_a_long_cell_and_the_kernel_goes_on(env, files, database_url, tmp_path):
    """``%etl join``, then ``%pipeline run`` of the same Join: each cell ends as Jupyter's Stop ends any cell,
    and the next cell works in the same kernel."""
    left, right = fanout_files(files)
    before = stored(database_url)
    with kernel({**os.environ, **env}) as (manager, client):
        def stopped(code: str) -> None:
            reply, took = stop_cell(manager, client, code, joining(database_url))
            assert took < PROMPT, f"{code}: stopped {took:.1f} s after Stop"
            assert (reply["content"]["status"], reply["content"]["ename"]) == ("error", "KeyboardInterrupt"), code
            assert_nothing_left(database_url, before)

        stopped(f"%etl join {json.dumps(join_of(left, right))}")
        works(client, f"%etl query -o found {json.dumps({'virtualFileId': left, 'query': {'v': '7'}})}\n"
                      "assert found == {'result': [{'k': 'k', 'v': '7'}]}, found")
        stopped(f"%pipeline run -o run {long_join_pipeline(tmp_path, left, right)}")
        works(client, "assert run.interrupted == ['join'] and run.status == {'join': 'interrupted', "
                      "'count': 'not run'}, run.status\n"
                      "assert 'long_join INTERRUPTED' in get_ipython().display_formatter.format(run)[0]['text/plain']")


def test_an_interrupt_during_deferred_work_is_raised_after_it():
    done = False
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the signal's handler runs meanwhile, and only notes it
            done = True
    except BaseException as exc:  # not pytest.raises: a KeyboardInterrupt from elsewhere would stop the session
        raised: BaseException | None = exc
    else:
        raised = None
    assert done and isinstance(raised, KeyboardInterrupt), (done, raised)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


#: where a Push's write transaction gets the test's signal (:func:`signalled_after_statement`): just after the
#: first of its statements that …
AFTER: dict[str, Callable[[str, Any], bool]] = {
    "returns rows": lambda _statement, cursor: cursor.description is not None,
    "creates the file's table": lambda statement, _cursor: statement.lstrip().startswith("CREATE TABLE"),
}


@contextlib.contextmanager
def signalled_after_statement(engine: sa.Engine, which: str) -> Iterator[list[str]]:
    """Within the block: the test's SIGUSR1 sent once, in SQLAlchemy's ``after_cursor_execute`` event of the
    first statement of a write transaction that is ``AFTER[which]``: the statement has run, its rows are not
    read yet. The handler raises as the next function is entered, in SQLAlchemy's code, where a Stop lands
    as often as anywhere between two statements. Yields the statements it was sent after."""
    sent: list[str] = []

    def signal_once(conn: sa.Connection, cursor: Any, statement: str, *_: Any) -> None:
        if not sent and is_writing(conn) and AFTER[which](statement, cursor):
            sent.append(statement)
            os.kill(os.getpid(), signal.SIGUSR1)

    sa.event.listen(engine, "after_cursor_execute", signal_once)
    try:
        yield sent
    finally:
        sa.event.remove(engine, "after_cursor_execute", signal_once)


@pytest.mark.parametrize("which", list(AFTER))
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_interrupt_just_after_a_statement_of_a_write_leaves_the_store_usable(env, files, database_url,
                                                                               signalled_after, which):
    """A Stop that lands in SQLAlchemy's code just after a statement of a write transaction ran: the action
    stops with the Stop's exception, the file's write lock is free at once, and the next write works.

    SQLAlchemy closes the connection then (an exit exception invalidates it) but not the cursor, which the
    exception's traceback keeps, as IPython keeps the last one: SQLite kept the closed connection's
    transaction, and its write lock, while the cursor lived, and the next cell's write waited the 60 s busy
    timeout, then failed "database is locked" ("returns rows": the layout stamp read as the write begins; 1 of 1
    before the fix). Inside the Push's cache setting (:func:`.engines.page_cache`), its setting back on the
    invalidated connection raised ``PendingRollbackError`` instead of the Stop: "etl.push failed (500)" ("creates
    the file's table"; 1 of 1)."""
    stopped: BaseException | None = None
    with signalled_after_statement(get_engine(database_url), which) as sent:
        try:
            invoke("etl.push", {"platformFile": files.add_bytes(b"a,b\n1,2\n", "t.csv").to_json()})
        except Stop as exc:
            stopped = exc  # kept, with its traceback, while the store is used again
    assert sent and isinstance(stopped, Stop), (sent, stopped)
    assert not writing(database_url), f"the write lock is still held after {sent[0]!r} was interrupted"
    assert invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "u.csv").to_json()})["virtualFileId"]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_interrupt_its_clean_up_fails_on_still_stops_the_action(env, files, database_url):
    """SQLAlchemy's commit asserts, in a ``finally``, that its transaction has ended: a Stop that lands as its
    ``_do_commit`` is entered, before the ``try`` that ends it, raises ``AssertionError`` there, and that error
    replaced the Stop: the Pull answered "etl.pull failed (500): AssertionError" (its read's commit; 1 of the
    1,000 call points of a Pull where the sweep interrupted it). An error raised while an interrupt unwinds the
    action is the interrupt's: the action stops with it."""
    pushed = invoke("etl.push", {"platformFile": files.add_bytes(b"a,b\n1,2\n", "t.csv").to_json()})
    outcome: BaseException | None = None
    with stopped_as_entered(sa.engine.base.RootTransaction._do_commit.__code__) as raised:
        try:
            invoke("etl.pull", {"virtualFileId": pushed["virtualFileId"], "exportType": "csv", "exportName": "o.csv"})
        except BaseException as exc:  # not pytest.raises: a KeyboardInterrupt from elsewhere would stop the session
            outcome = exc
    assert raised and isinstance(outcome, Stop), repr(outcome)


@pytest.mark.parametrize("writes", [False, True], ids=["read", "write"])
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_interrupt_as_a_row_is_fetched_leaves_no_snapshot_on_the_pooled_connection(env, database_url, files,
                                                                                      writes):
    """A Stop that lands as SQLAlchemy's fetch of a row is entered (before its ``try``, which would invalidate
    the connection) leaves the statement active, its cursor alive in the traceback (IPython keeps the last
    one), on a connection the pool takes back after its rollback. The statement kept its read snapshot: the
    file's log could not be checkpointed, and once another connection wrote, that pooled connection's next
    ``BEGIN IMMEDIATE`` failed at once with "database is locked" (a Push in the sweep, after a Stop in the
    previous one; here a snapshot left open, 1 of 1 before the fix)."""
    engine = get_engine(database_url)
    outcome: BaseException | None = None
    with stopped_as_entered(sa.engine.cursor.CursorFetchStrategy.fetchone.__code__) as raised:
        try:
            with engine.execution_options(**(WRITE if writes else {})).begin() as conn:
                conn.execute(sa.text("SELECT version FROM cop_store_layout")).fetchone()
        except BaseException as exc:  # not pytest.raises: a KeyboardInterrupt from elsewhere would stop the session
            outcome = exc  # kept, with its traceback, while the store is used again
    assert raised and isinstance(outcome, Stop), repr(outcome)
    assert open_snapshots(database_url, "") == 0
    other = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:  # another process writes
        other.executescript("BEGIN IMMEDIATE; CREATE TABLE elsewhere (a); COMMIT;")
    finally:
        other.close()
    assert invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "u.csv").to_json()})["virtualFileId"]


@pytest.fixture
def sqlite_kernel_env(tmp_path: Path) -> dict[str, str]:
    """A kernel's environment on a SQLite store of its own (what the early-Stop tests check does not depend
    on the database)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_"))}
    return {**clean, "CONNECTOR_OPS_HOME": str(tmp_path / "home"),
            "CONNECTOR_OPS_DATABASE_URL": f"sqlite:///{tmp_path / 'vf.db'}"}


def stopped_early_then_again(env: dict[str, str], cell: str, delay: float, loaded: str = "") -> None:
    """In a new kernel, the first ``cell`` stopped ``delay`` s after it starts (or done before the Stop came,
    or the Stop taken by ipykernel around the cell, with no reply: :func:`handled`; any is fine); then the
    same cell must work."""
    with kernel(env, loaded) as (manager, client):
        handled(client, stop(manager, client, cell, after(delay))[0])
        works(client, cell)


#: A cell after which the kernel gets a SIGINT in its own code, where a Stop that comes as the cell ends
#: lands: ipykernel's flush of ``sys.stdout`` before it sends the cell's reply (its ``execute_request``).
STOPPED_AT_THE_KERNELS_FLUSH = """import os, signal, sys

class StopAtFlush:
    def __init__(self, stream):
        self.stream = stream

    def __getattr__(self, name):
        return getattr(self.stream, name)

    def flush(self):
        sys.stdout = self.stream
        os.kill(os.getpid(), signal.SIGINT)
        self.stream.flush()

sys.stdout = StopAtFlush(sys.stdout)
"""


def test_a_stop_the_kernel_takes_after_the_cell_ends_the_wait_and_the_kernel_goes_on(sqlite_kernel_env):
    """The early-Stop tests below press Stop at a moment, and a Stop that comes as the first cell ends (or as
    it begins) lands in ipykernel's own code, which sends that cell no reply. Their wait for the reply failed
    in CI (``_queue.Empty`` after 60 s at 0.2 s, the cell slower under load); here 3 kernels in 500 with a
    Stop at random in 0.00–0.20 s, each idle and usable, its stderr "KeyboardInterrupt caught in kernel.".
    They wait for the kernel to be idle again (:func:`handled`), which this Stop, put where such a Stop
    lands, ends."""
    with kernel(sqlite_kernel_env) as (_, client):
        handled(client, client.execute(STOPPED_AT_THE_KERNELS_FLUSH))
        works(client, "import sys\nassert not isinstance(sys.stdout, StopAtFlush), sys.stdout")


@pytest.mark.parametrize("delay", [0.05, 0.1])
def test_a_stop_early_in_a_kernels_first_pipeline_run_leaves_pipelines_working(sqlite_kernel_env, tmp_path, delay):
    """Jupyter's Stop while the first ``%pipeline run`` of a kernel still imports Dagster's modules: cut in
    half, those imports registered classes twice, and every later run failed ("Multiple deserializers
    registered", 1 kernel in 2 at 0.05 s before the fix). The next run must work."""
    small = tmp_path / "small.yaml"
    small.write_text(json.dumps({"name": "small", "steps": [
        {"id": "rows", "action": "etl.iterate", "input": {"content": [{"a": "1"}], "maxBatchSize": 1}}]}))
    stopped_early_then_again(sqlite_kernel_env, f"%pipeline run -o again {small}\nassert again.success", delay)


@pytest.mark.parametrize("delay", [0.05, 0.2, 0.4])
def test_a_stop_early_in_a_kernels_first_cell_leaves_tables_working(sqlite_kernel_env, tmp_path, delay):
    """Jupyter's Stop while the first cell's output still imported pandas: cut in half, the import left
    pandas partially initialised, and every later table failed ("partially initialized module 'pandas'",
    "module 'numpy' has no attribute 'logical_and'": at 0.2 and 0.4 s before the fix, on an idle machine).
    When the window falls is a matter of timing, so the test also checks what closes it: pandas is loaded
    with the magics, where Stop is held back, and the first cell imports none of it."""
    data = tmp_path / "t.csv"
    data.write_text("a,b\n1,2\n")
    cell = (f"%connectors add-file {data} -o f\n"
            '%etl push -o p {"platformFile": {{f}}}\n'
            '%etl pull --df d {"virtualFileId": "{{p.virtualFileId}}"}\n'
            "assert d.to_dict('records') == [{'a': 1, 'b': 2}], d")  # numbers where no text changes
    stopped_early_then_again(sqlite_kernel_env, cell, delay,
                             loaded="import sys\nassert {'pandas', 'numpy', 'pyarrow'} <= set(sys.modules)")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_ctrl_c_once_the_output_is_printed_changes_nothing(env, files, database_url, tmp_path):
    """A Ctrl-C after a Push had committed and printed its output, while the command closed its session (the
    loader process's checkpoint, the connections), made it exit as interrupted (``Aborted!``, 1; -2 by
    SIGINT when it landed outside click) though its file was kept. Once the answer is final the command
    ignores Ctrl-C: exit 0, the output whole."""
    rows = "id,name,pad\n" + "".join(f"{i},name {i},{'x' * 60}\n" for i in range(600_000))
    pf = files.add_bytes(rows.encode(), "rows.csv", "text/csv").to_json()
    (tmp_path / "push.json").write_text(json.dumps({"platformFile": pf}))
    before = stored(database_url)[0]
    since: list[Callable[[], bool]] = []

    def answered() -> bool:  # committed, and the few milliseconds to the printed answer gone by
        if not since:
            if stored(database_url)[0] == before:
                return False
            since.append(after(0.15))
        return since[0]()

    done, _ = ctrl_c(["invoke", "etl.push", f"@{tmp_path / 'push.json'}"], env, answered)
    assert done.returncode == 0, done
    assert "Aborted!" not in done.stderr
    assert json.loads(done.stdout)["virtualFileId"] in stored(database_url)[0] - before


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_ctrl_c_once_a_pipeline_run_has_ended_changes_nothing(env, database_url, tmp_path):
    """A Ctrl-C just after ``pipeline run`` printed "run … succeeded" (every step committed), while it closed
    its session (the loader process's checkpoint of a big Push, the connections), ended the process as a
    failure (``Aborted!``, 1; -2 by SIGINT): a cron job saw a failed run. Once the run has ended the command
    ignores Ctrl-C, as ``invoke`` does: the run's exit code, 0, and its output whole."""
    (tmp_path / "rows.csv").write_text("id,name,pad\n" + "".join(f"{i},name {i},{'x' * 60}\n"
                                                                 for i in range(600_000)))
    (tmp_path / "big.yaml").write_text("name: big_push\nsteps:\n  - id: load\n    action: etl.push\n"
                                       "    input: {platformFile: \"${file:rows.csv}\"}\n")
    before = stored(database_url)[0]
    child = subprocess.Popen([SCRIPT, "pipeline", "run", str(tmp_path / "big.yaml")], env={**os.environ, **env},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        assert child.stderr is not None
        sent = False
        for line in child.stderr:
            if line.startswith("run ") and line.rstrip().endswith(" succeeded"):
                child.send_signal(signal.SIGINT)
                sent = True
                break
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert sent, "the run did not succeed"
    assert child.returncode == 0, (child.returncode, err)
    assert "Aborted!" not in err and "Traceback" not in err
    pushed = json.loads(out.partition("load (etl.push): ")[2].splitlines()[0])["virtualFileId"]
    assert pushed in stored(database_url)[0] - before


def _in_writing_exit(frame: Any) -> bool:
    """``frame`` is ``__exit__`` of the generator context manager of the store's write transaction."""
    cm = frame.f_locals.get("self")
    return (frame.f_code is contextlib._GeneratorContextManager.__exit__.__code__
            and getattr(getattr(cm, "gen", None), "gi_code", None) is _WRITING_CODE)


_WRITING_CODE = StoreCore.writing.__wrapped__.__code__



@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_an_interrupt_as_a_write_block_is_left_leaves_the_store_usable(env, files, database_url):
    """A Stop that lands in ``contextlib``'s ``__exit__`` of the store's write transaction, before it resumes the
    generator that ends the transaction: the exception's traceback keeps that frame, and so the suspended
    generator, its connection and its open ``BEGIN IMMEDIATE``, as long as IPython keeps the last traceback. The
    next cell's write waited 60 s and failed "database is locked" (Validate, call 18,754 of a sweep; here a
    Delete Rows, held before the fix). The action runner ends such a block as the exception leaves the action:
    the lock is free at once and the next write works."""
    pushed = invoke("etl.push", {"platformFile": files.add_bytes(b"a,b\n1,2\n3,4\n", "t.csv").to_json()})
    raised: list[bool] = []
    stopped: BaseException | None = None
    sys.settrace(stopping(_in_writing_exit, raised))
    try:
        invoke("etl.delete_rows", {"virtualFileId": pushed["virtualFileId"], "request": {"a": "1"}})
    except Stop as exc:
        stopped = exc  # kept, with its traceback, while the store is used again
    finally:
        sys.settrace(None)
    assert raised and isinstance(stopped, Stop), (raised, stopped)
    assert not writing(database_url), "the write lock is still held after a Stop in the write block's __exit__"
    assert invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "u.csv").to_json()})["virtualFileId"]
