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


def _csv_server():
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def data(request):
        return Response(b"a,b\n1,2\n", media_type="text/csv")

    return Starlette(routes=[Route("/data.csv", data)])


def test_a_remote_links_password_and_signature_stay_out_of_the_event_log(tmp_path: Path, monkeypatch) -> None:
    """``read_platform_files`` recorded a step's input links verbatim: a signed link given through
    ``${env.SIGNED_LINK}`` (as the docs advise for secrets) put its password and signature in Dagster's
    stored events, on success and on failure. gc reads only a link's last path segment (our file's id)."""
    import dagster as dg
    from dagster._serdes import serialize_value

    from connector_ops.environment import resources_for
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    with serving(_csv_server()) as base:
        resources = resources_for(environ={"CONNECTOR_OPS_HOME": str(tmp_path), "CONNECTOR_OPS_MIN_FREE_DISK": "0",
                                           "CONNECTOR_OPS_ALLOWED_PRIVATE_HOSTS": base.removeprefix("http://")})
        monkeypatch.setenv("SIGNED_LINK", base.replace("http://", "http://bob:S3cretPW@")
                           + "/data.csv?X-Amz-Signature=SIGSECRET123")
        monkeypatch.setenv("BAD_DELIMITER", "too long")  # refused when the step runs, after it read its input
        path = write(tmp_path, """
            name: leak_check
            steps:
              - id: load
                action: etl.push
                input: {platformFile: {name: data.csv, contentType: text/csv, link: "${env.SIGNED_LINK}"}}
              - id: refused
                action: etl.push
                input: {platformFile: {name: data.csv, contentType: text/csv, link: "${env.SIGNED_LINK}"},
                        parameters: {csvDelimiter: "${env.BAD_DELIMITER}"}}
            """)
        instance = dg.DagsterInstance.ephemeral()
        run = compile_pipeline(load_pipeline(path)).job.execute_in_process(instance=instance, resources=resources,
                                                                          raise_on_error=False)
    steps = {e.step_key: e.event_type_value for e in run.all_events if e.is_step_success or e.is_step_failure}
    assert steps == {"load__input": "STEP_SUCCESS", "load": "STEP_SUCCESS", "refused__input": "STEP_SUCCESS",
                     "refused": "STEP_FAILURE"}
    stored = " ".join(serialize_value(entry) for entry in instance.all_logs(run.run_id))
    assert "S3cretPW" not in stored and "SIGSECRET123" not in stored
    assert f'"{base}/data.csv?\\u2026"' in stored  # what the steps read, as messages show links


def test_a_remote_link_with_a_signature_is_shown_without_it() -> None:
    from connector_ops.ops.metadata import read_metadata, stored_platform_file

    link = "https://bob:pw@files.example.com/r.csv?sig=SIG"
    meta = platform_file_metadata({"name": "r.csv", "link": link}, None)
    assert meta["link"].value == "https://files.example.com/r.csv?…"
    assert read_metadata({"platformFile": {"id": "abc", "link": link}})["read_platform_files"].value == [
        "abc", "https://files.example.com/r.csv?…"]
    assert stored_platform_file({"name": "r.csv", "link": link}, None) == {
        "name": "r.csv", "link": "https://files.example.com/r.csv?…"}


def test_our_own_files_link_is_kept_as_it_is(tmp_path: Path) -> None:
    from connector_ops.ops.metadata import read_metadata, stored_platform_file

    store = PlatformFileStore(files_dir=str(tmp_path), file_server_url="http://127.0.0.1:9")
    pf = store.add_bytes(b"x", "x.csv").to_json()
    assert stored_platform_file(pf, store) == pf
    assert set(read_metadata({"platformFile": pf})["read_platform_files"].value) == {pf["id"], pf["link"]}
