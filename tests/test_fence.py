"""The fence around commits (connector_ops.kernel.fence): under a gate that refuses, the store's writes, step
outputs, platform files and changing HTTP requests commit nothing and say why; without a gate, or with one
that agrees, everything is as before. Real SQLite files and the PostgreSQL server."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from connector_ops.kernel.fence import Fenced, check_fence, fenced
from connector_ops.resources.http_client import Client
from connector_ops.resources.virtual_files.step_outputs import StepOutputs
from tests.store_activity import orphans

REFUSAL = 'step "join" of run r may no longer commit: the run is FAILURE, no longer in progress'


def refuse() -> str:
    return REFUSAL


def agree() -> None:
    return None


def test_without_a_gate_nothing_is_asked() -> None:
    check_fence("anything")


def test_a_refusal_names_what_was_not_committed_and_why() -> None:
    with fenced(refuse), pytest.raises(Fenced, match=f"^the mail was not committed: {re.escape(REFUSAL)}$") as refused:
        check_fence("the mail")
    assert refused.value.status == 409
    check_fence("the mail")  # the gate is the block's only


def test_the_store_commits_nothing_behind_a_refusing_gate(store: Any, database_url: str) -> None:
    before = store.inventory()
    with fenced(refuse), pytest.raises(Fenced, match="the virtual-file store's write was not committed"):
        store.create_from_rows([{"a": "1"}, {"a": "2"}])
    assert store.inventory() == before
    assert not orphans(database_url)  # the row table went with the transaction
    with fenced(agree):
        vf_id = store.create_from_rows([{"a": "1"}])
    assert store.rows(vf_id) == [{"a": "1"}]


def test_a_step_output_is_not_committed_behind_a_refusing_gate(database_url: str, store: Any) -> None:
    outputs = StepOutputs(database_url)
    with fenced(refuse), pytest.raises(Fenced, match=re.escape("step output 'r/join/result' was not committed")):
        outputs.put("r/join/result", "r", b"value")
    assert "r" not in [run_id for run_id, _ in outputs.runs()]


@pytest.mark.parametrize("backend", ["folder", "database"])
def test_a_platform_file_is_not_committed_behind_a_refusing_gate(backend: str, env: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from connector_ops.environment import resources_for

    if backend == "database":
        monkeypatch.setenv("CONNECTOR_OPS_FILES_BACKEND", "database")
        env = {**env, "CONNECTOR_OPS_FILES_BACKEND": "database"}
    files = resources_for(environ=env)["platform_files"]
    before = files.inventory()
    with fenced(refuse), pytest.raises(Fenced, match=re.escape("platform file 'out.csv' was not committed")):
        files.add_bytes(b"a\n1\n", "out.csv", "text/csv")
    assert files.inventory() == before


def test_a_changing_request_is_refused_before_it_is_sent() -> None:
    with Client() as client, fenced(refuse):
        with pytest.raises(Fenced, match=re.escape("POST request to 127.0.0.1:9 was not committed")):
            client.post("http://127.0.0.1:9/send", content=b"mail")  # refused before any connection
        with pytest.raises(httpx.ConnectError):  # a read goes on (and finds nothing listening)
            client.get("http://127.0.0.1:9/")
