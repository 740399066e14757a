"""Standard Dagster metadata of outputs: a platform file gets a path here, and a link only where it opens."""

from __future__ import annotations

from pathlib import Path

from connector_ops.ops.metadata import platform_file_metadata, run_metadata
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import free_port, serving


def test_a_link_only_while_the_file_server_answers(tmp_path: Path) -> None:
    stopped = PlatformFileStore(files_dir=str(tmp_path / "a"), file_server_url="http://127.0.0.1:9")
    pf = stopped.add_bytes(b"x,y\n1,2\n", "t.csv").to_json()
    meta = platform_file_metadata(pf, stopped)
    assert meta["path"].value == str(stopped.data_path(stopped.local_id(pf)))
    assert meta["size_bytes"].value == 8 and meta["name"].value == "t.csv" and "link" not in meta

    port = free_port()
    running = PlatformFileStore(files_dir=str(tmp_path / "b"), file_server_url=f"http://127.0.0.1:{port}")
    with serving(create_app(running), port):
        pf = running.add_bytes(b"hello", "h.txt").to_json()
        meta = platform_file_metadata(pf, running)
    assert meta["link"].value == pf["link"] and meta["path"].value.endswith(pf["id"])


def test_a_remote_link_is_shown_without_a_path() -> None:
    meta = platform_file_metadata({"name": "r.csv", "link": "https://files.example.com/r.csv", "size": 3}, None)
    assert meta["link"].value == "https://files.example.com/r.csv" and "path" not in meta


def test_call_metadata_counts_the_bytes_read() -> None:
    payload = {"attachments": [{"platformFile": {"size": 10}}, {"platformFile": {"size": 5}}]}
    meta = run_metadata(payload, 0.1234)
    assert meta["bytes_in"].value == 15 and meta["duration_s"].value == 0.123
    assert "bytes_in" not in run_metadata({"virtualFileId": "v"}, 0.0)
