"""The file server short of file descriptors, or refused a file by the system: a real ``connector-ops files
serve`` process under a low ``RLIMIT_NOFILE``, over loopback.

Before, a download that found the process out of descriptors (many parallel downloads under ``ulimit -n``)
was a bare ``500 Internal Server Error`` and a traceback in the server's log per request; now it is a 503
with ``Retry-After`` and a JSON message (one log line), and any other system refusal a 500 JSON message.
Connections that came when no descriptor was left to accept them were reset (uvloop); now the server takes
no more connections at once than its limit allows (uvicorn's 503 above), and any it cannot accept wait."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx

from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import free_port

#: descriptors the server may hold: enough to start, few enough that a test fills them in a few requests
NOFILE = 48


def _low_nofile() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


@contextlib.contextmanager
def _server(home: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``files serve`` of ``home``'s files on a free loopback port, its descriptors limited to ``NOFILE``."""
    port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CONNECTOR_OPS_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "connector_ops.cli", "files", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env={**environ, "CONNECTOR_OPS_HOME": str(home)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=_low_nofile,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/health")
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, "file server did not start"
                time.sleep(0.1)
        yield base, server
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_out_of_descriptors_is_a_503_to_retry_and_other_refusals_a_500(tmp_path: Path) -> None:
    """Each client keeps its connection open (one descriptor of the server's each) until a download finds
    none left for the file: that one is a 503 with ``Retry-After``, never a 500; once the clients go, the
    same file is served again. A descriptor that is a folder where a file should be is a plain 500. Neither
    leaves a traceback in the log, one line each instead."""
    home = tmp_path / "home"
    store = PlatformFileStore(files_dir=str(home / "files"))
    data = b"city\nParis\n" * 100
    pf = store.add_bytes(data, "cities.csv", "text/csv")
    broken = store.add_bytes(b"x", "broken.csv", "text/csv")
    meta = home / "files" / f"{broken.id}.json"
    meta.unlink()
    meta.mkdir()  # read_bytes: IsADirectoryError, an OSError no retry mends
    clients: list[httpx.Client] = []
    with _server(home) as (base, server):
        # its connection limit was chosen from 48 at its start: a few descriptors left now, and the lookup of
        # a download runs out before the limit's 503 (a limit lowered meanwhile, descriptors taken elsewhere)
        held = len(os.listdir(f"/proc/{server.pid}/fd"))
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (held + 6, held + 6))
        try:
            refused = httpx.get(f"{base}/files/{broken.id}")
            assert refused.status_code == 500 and "retry-after" not in refused.headers
            assert refused.json() == {"message": "the file server could not read the file (Is a directory)"}
            answers = []
            for _ in range(2 * NOFILE):
                client = httpx.Client(timeout=30)
                clients.append(client)
                try:
                    response = client.get(f"{base}/files/{pf.id}")
                except httpx.TransportError:  # no descriptor even for the connection: not ours to answer
                    continue
                answers.append(response.status_code)
                if response.status_code != 200:
                    break
            assert answers[-1] == 503, answers
            assert set(answers[:-1]) == {200}, answers
            assert response.headers["retry-after"] == "1"
            assert response.json() == {
                "message": "the file server is short of resources (Too many open files); retry later"}
        finally:
            for client in clients:
                client.close()
        deadline = time.monotonic() + 10
        while (again := httpx.get(f"{base}/files/{pf.id}")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.1)  # the server sees the clients' connections closed
        assert again.status_code == 200 and again.content == data
    log = server.stderr.read().decode() if server.stderr else ""
    assert "Traceback" not in log, log
    waits = "WARNING:  connections wait a second to be accepted: Too many open files"  # a client faster than a close
    problems = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR")) and line != waits]
    assert problems == [f"ERROR:    file {broken.id} not served (500): Is a directory",
                        f"WARNING:  file {pf.id} not served (503, retry later): Too many open files"], log



def _download(url: str, start: threading.Barrier, answers: Counter[object]) -> None:
    start.wait()
    try:
        response = httpx.get(url, timeout=60)
    except httpx.TransportError as exc:  # reset, or closed before an answer
        answers[type(exc).__name__] += 1
        return
    if response.status_code == 503:  # uvicorn's, above the connection limit, or ours, out of descriptors
        assert response.text == "Service Unavailable" or "retry later" in response.json()["message"]
    answers[response.status_code] += 1


def test_a_burst_of_clients_each_gets_an_answer_none_a_reset(tmp_path: Path) -> None:
    """200 clients at once against 48 descriptors: each gets a 200 or a 503, none a reset or a connection
    closed unanswered, the log holds no traceback, and the server serves the file normally afterwards."""
    home = tmp_path / "home"
    data = b"city\nParis\n" * 10_000
    pf = PlatformFileStore(files_dir=str(home / "files")).add_bytes(data, "cities.csv", "text/csv")
    clients = 200
    with _server(home) as (base, server):
        answers: Counter[object] = Counter()
        start = threading.Barrier(clients)
        threads = [threading.Thread(target=_download, args=(f"{base}/files/{pf.id}", start, answers))
                   for _ in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert set(answers) <= {200, 503} and answers[200] > 0, answers
        again = httpx.get(f"{base}/files/{pf.id}")
        assert again.status_code == 200 and again.content == data
        assert server.poll() is None
    log = server.stderr.read().decode() if server.stderr else ""
    assert "Traceback" not in log, log
