"""``retry:`` in a pipeline file: validated with lines, compiled into RetryPolicies, honoured at run time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from connector_ops.environment import resources_for
from connector_ops.pipelines.dsl import PipelineError, compile_pipeline, load_pipeline
from tests.drive.support import fast_google, google_env
from tests.pipeline_files import write
from tests.servers import serving
from tests.servers.fake_drive import FakeDrive

LISTING = """
    name: listing
    {top}
    steps:
      - id: ls
        action: drive.list
        input: {{folderId: root}}
        {step}
      - id: again
        action: drive.list
        input: {{folderId: root}}
        after: [ls]
"""


def test_retry_is_validated_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, LISTING.format(
        top="retry: {max_retries: -1, delay: fast}",
        step="retry: {max_retries: 2, backoff: exponential, jitter: full}"))
    with pytest.raises(PipelineError) as caught:
        load_pipeline(path)
    text = str(caught.value)
    assert "p.yaml:2: `max_retries` is required: a whole number from 0 to 100" in text
    assert "p.yaml:2: `delay` must be a number of seconds, 0 or more" in text
    assert "p.yaml:7: step ls: unknown key 'jitter' in retry; allowed: max_retries, delay, backoff" in text
    assert "p.yaml:7: step ls: `backoff` needs `delay`" in text


@pytest.mark.parametrize("delay", [".nan", ".inf", "-.inf"])
def test_a_delay_that_is_no_number_of_seconds_is_refused(tmp_path: Path, delay: str) -> None:
    """YAML's ``.nan`` and ``.inf`` are floats: ``.inf`` would wait for ever before the retry."""
    path = write(tmp_path, LISTING.format(top=f"retry: {{max_retries: 1, delay: {delay}}}", step=""))
    with pytest.raises(PipelineError, match=r"p\.yaml:2: `delay` must be a number of seconds, 0 or more"):
        load_pipeline(path)


def test_retry_compiles_to_retry_policies(tmp_path: Path) -> None:
    path = write(tmp_path, LISTING.format(top="retry: {max_retries: 1}",
                                          step="retry: {max_retries: 3, delay: 0.5, backoff: linear}"))
    job = compile_pipeline(load_pipeline(path)).job
    assert job.graph.node_named("ls").retry_policy == dg.RetryPolicy(max_retries=3, delay=0.5,
                                                                    backoff=dg.Backoff.LINEAR)
    assert job.graph.node_named("again").retry_policy is None
    assert job.op_retry_policy == dg.RetryPolicy(max_retries=1)  # every step without its own


def test_no_retry_means_no_policy(tmp_path: Path) -> None:
    job = compile_pipeline(load_pipeline(write(tmp_path, LISTING.format(top="", step="")))).job
    assert job.graph.node_named("ls").retry_policy is None and job.op_retry_policy is None


@pytest.fixture
def fake_drive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDrive]:
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    fake = FakeDrive(storage=tmp_path / "fake-drive")
    with serving(fake.app) as url:
        fake.base_url = url
        google_env(fake, monkeypatch)
        yield fake


def restarted(result: dg.ExecuteInProcessResult) -> list[str]:
    return [e.step_key for e in result.all_events if e.event_type_value == "STEP_RESTARTED"]


def test_step_and_pipeline_retries_count_on_the_fake_drive(tmp_path: Path, fake_drive: FakeDrive) -> None:
    """The listing has its own policy (2 retries), the rename the pipeline's (1 retry); each client's own
    retries are off, so every Dagster attempt is one request to the fake."""
    file_id = fake_drive.add_file("a.txt", b"a")
    path = write(tmp_path, f"""
        name: listing
        retry: {{max_retries: 1}}
        steps:
          - id: ls
            action: drive.list
            input: {{folderId: root}}
            retry: {{max_retries: 2}}
          - id: rename
            action: drive.rename
            input: {{id: {file_id}, name: b.txt}}
            after: [ls]
    """)
    job = compile_pipeline(load_pipeline(path)).job
    resources = resources_for(["drive"])
    resources["drive"] = fast_google(resources, max_attempts=1)
    fake_drive.fail("GET", "/drive/v3/files", status=503, times=2)
    fake_drive.fail("PATCH", f"/drive/v3/files/{file_id}", status=503, times=1)
    result = job.execute_in_process(resources=resources, raise_on_error=False)
    assert result.success and restarted(result) == ["ls", "ls", "rename"]

    fake_drive.fail("PATCH", f"/drive/v3/files/{file_id}", status=503, times=2)  # one more than its policy
    result = job.execute_in_process(resources=resources, raise_on_error=False)
    assert not result.success and restarted(result) == ["rename"]
