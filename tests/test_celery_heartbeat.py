"""The run worker's watch of a Celery step's heartbeat (connector_ops.pipelines.celery_heartbeat), on a real
Redis result backend written as a step task writes it; and the setting of its limit. The celery extra is part
of the dev install, so an import failure here is an error, never a skip."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, states
from celery.exceptions import TaskRevokedError

from connector_ops.environment import EXECUTOR_VARIABLE, LOST_AFTER_VARIABLE
from connector_ops.pipelines.celery_heartbeat import (
    HEARTBEAT_SECONDS,
    HEARTBEAT_STATE,
    MIN_LOST_AFTER,
    TERMINATING_LOST_AFTER,
    StepLostError,
    WatchedResult,
)
from connector_ops.pipelines.executors import (
    BROKER_VARIABLE,
    DEFAULT_LOST_AFTER,
    ExecutorSettingError,
    celery_lost_after,
    job_executor,
)
from tests.deployment import redis_server
from tests.servers import free_port

LIMIT = 1.0  # seconds: WatchedResult takes any limit; the variable's minimum is for real workers


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Celery]:
    port = free_port()
    redis = redis_server(port, tmp_path_factory.mktemp("redis"), {})
    try:
        yield Celery(broker=f"redis://127.0.0.1:{port}/0", backend=f"redis://127.0.0.1:{port}/1")
    finally:
        redis.stop()


def beat(app: Celery, task_id: str, n: int) -> None:
    """A heartbeat as a step task writes it (CancellableStep)."""
    app.backend.store_result(task_id, {"hostname": "w1@host", "pid": 4242, "run_id": "r", "step": "join",
                                       "time": float(n)}, HEARTBEAT_STATE)


def watched(app: Celery) -> WatchedResult:
    return WatchedResult(str(uuid.uuid4()), app=app, step_key="join", lost_after=LIMIT)


def ready_for(result: WatchedResult, seconds: float, between: Any = None) -> bool:
    """Whether the result became ready while polled for ``seconds`` (``between`` called at each poll)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if between:
            between()
        if result.ready():
            return True
        time.sleep(0.05)
    return False


def test_a_queued_step_waits_without_limit(app: Celery) -> None:
    assert not ready_for(watched(app), 2 * LIMIT)  # PENDING: no heartbeat yet


def test_a_step_that_keeps_beating_is_not_lost_and_its_result_arrives(app: Celery) -> None:
    result = watched(app)
    beats = iter(range(1000))
    last = [0.0]

    def beating() -> None:
        if time.monotonic() - last[0] > LIMIT / 4:
            beat(app, result.id, next(beats))
            last[0] = time.monotonic()

    assert not ready_for(result, 3 * LIMIT, beating)
    app.backend.store_result(result.id, ["event"], states.SUCCESS)
    assert result.ready() and result.get() == ["event"]


def test_a_step_whose_heartbeat_stopped_is_lost(app: Celery) -> None:
    result = watched(app)
    beat(app, result.id, 1)
    assert not result.ready()
    started = time.monotonic()
    assert ready_for(result, 3 * LIMIT)
    assert time.monotonic() - started >= LIMIT
    with pytest.raises(StepLostError) as lost:
        result.get()
    message = str(lost.value)
    assert message.startswith('Step "join" was lost: its Celery worker w1@host (pid 4242) sent no heartbeat for 1 s')
    assert LOST_AFTER_VARIABLE in message and "probably died" in message and "rolled back" in message
    assert "Re-execute the run from failure" in message


def test_a_lost_step_of_a_run_being_terminated_is_revoked(app: Celery) -> None:
    result = watched(app)
    beat(app, result.id, 1)
    result.revoke()  # what dagster-celery's loop does on Terminate
    assert ready_for(result, 3 * LIMIT)
    with pytest.raises(TaskRevokedError, match='Step "join" was lost'):
        result.get()


@pytest.mark.parametrize("value", ["soon", "5", "inf", "-60"])
def test_a_bad_limit_names_the_variable(value: str) -> None:
    env = {EXECUTOR_VARIABLE: "celery", BROKER_VARIABLE: "redis://127.0.0.1:1/0", LOST_AFTER_VARIABLE: value}
    with pytest.raises(ExecutorSettingError, match=f"{LOST_AFTER_VARIABLE}='{value}' is not a number of seconds"):
        job_executor(env)


def test_the_limit_defaults_to_a_minute() -> None:
    assert celery_lost_after({}, MIN_LOST_AFTER) == DEFAULT_LOST_AFTER == 60
    assert celery_lost_after({LOST_AFTER_VARIABLE: " 15 "}, MIN_LOST_AFTER) == 15


def test_a_step_is_declared_lost_only_once_its_fence_is_recorded(app: Celery) -> None:
    """The run worker records the loss where the step's fence reads it before it gives up on the step; a record
    that fails (the instance unreachable) puts the loss off to the next look."""
    recorded: list[str] = []
    failures = [RuntimeError("the instance is unreachable")]

    def fence(task_id: str) -> None:
        if failures:
            raise failures.pop()
        recorded.append(task_id)

    result = WatchedResult(str(uuid.uuid4()), app=app, step_key="join", lost_after=LIMIT, fence=fence)
    beat(app, result.id, 1)
    assert not result.ready()
    time.sleep(LIMIT + 0.2)
    with pytest.raises(RuntimeError, match="unreachable"):
        result.ready()
    assert not recorded
    assert result.ready() and recorded == [result.id]
    with pytest.raises(StepLostError, match="commits nothing when it resumes"):
        result.get()


def test_a_lost_step_of_a_run_being_terminated_is_given_up_after_two_missed_beats(app: Celery) -> None:
    """Terminate: the run worker revokes its tasks; a task in its heartbeat state whose worker is dead gets no
    answer, and the run waited for the whole lost limit. Once revoked, two missed beats are enough."""
    result = WatchedResult(str(uuid.uuid4()), app=app, step_key="join", lost_after=60)
    beat(app, result.id, 1)
    assert not result.ready()
    result.revoke()
    started = time.monotonic()
    assert ready_for(result, TERMINATING_LOST_AFTER + 2)
    assert time.monotonic() - started < TERMINATING_LOST_AFTER + 1
    with pytest.raises(TaskRevokedError, match='Step "join" was lost while the run was being terminated'):
        result.get()


def test_a_revoked_step_that_keeps_beating_is_waited_for(app: Celery) -> None:
    """A live worker's step beats on until it stops (interrupted) and answers REVOKED: not lost meanwhile."""
    result = WatchedResult(str(uuid.uuid4()), app=app, step_key="join", lost_after=60)
    beats = iter(range(1000))
    last = [0.0]

    def beating() -> None:
        if time.monotonic() - last[0] > HEARTBEAT_SECONDS:
            beat(app, result.id, next(beats))
            last[0] = time.monotonic()

    beating()
    result.revoke()
    assert not ready_for(result, 3 * TERMINATING_LOST_AFTER, beating)
