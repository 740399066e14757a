"""Step outputs in the store's database (both databases): what a step on one host writes, another reads."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import sqlalchemy as sa
from dagster._core.types.dagster_type import resolve_dagster_type

from connector_ops.environment import resources_for
from connector_ops.ops.io_manager import StepOutputIOManager, pickled_within, step_output_io_manager
from connector_ops.pipelines.definitions import build_definitions
from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
from connector_ops.pipelines.runner import run_compiled
from connector_ops.resources.virtual_files.catalog import step_output
from connector_ops.resources.virtual_files.engines import get_engine
from connector_ops.resources.virtual_files.step_outputs import StepOutputs
from tests.pipeline_files import write


def kept(database_url: str, run_id: str) -> dict[str, Any]:
    with get_engine(database_url).begin() as conn:
        rows = conn.execute(sa.select(step_output.c.key, step_output.c.value)
                            .where(step_output.c.run_id == run_id)).all()
    return {key: pickle.loads(value) for key, value in rows}


def test_a_fan_out_pipeline_keeps_every_output_in_the_database(env: dict[str, str]) -> None:
    defs = build_definitions()
    assert isinstance(defs.resources["io_manager"], StepOutputIOManager)
    result = defs.resolve_job_def("sales_batches").execute_in_process()
    assert result.success
    outputs = kept(env["CONNECTOR_OPS_DATABASE_URL"], result.run_id)
    run = result.run_id
    # each batch of the foreach (a dynamic output) and its mapped step are kept under their mapping key
    batches = [k for k in outputs if k.startswith(f"{run}/check__batches/")]
    assert len(batches) >= 2 and all(k.count("/") == 3 for k in batches)
    assert outputs[f"{run}/sales/virtual_file_id"] == result.output_for_node("sales", "virtual_file_id")
    assert outputs[f"{run}/summary/content"] == result.output_for_node("summary", "content")


def test_another_process_reads_what_a_run_wrote(env: dict[str, str]) -> None:
    """A second host is a second process with the same database URL and nothing of the first's disk."""
    defs = build_definitions()
    result = defs.resolve_job_def("sales_batches").execute_in_process()
    key = f"{result.run_id}/sales/virtual_file_id"
    script = ("import pickle, sys; from connector_ops.resources.virtual_files.step_outputs import StepOutputs;"
              "print(pickle.loads(StepOutputs(sys.argv[1]).get(sys.argv[2])))")
    other = subprocess.run([sys.executable, "-c", script, env["CONNECTOR_OPS_DATABASE_URL"], key],
                           capture_output=True, text=True, check=True, cwd="/", env={**os.environ})
    assert other.stdout.strip() == result.output_for_node("sales", "virtual_file_id")


def test_a_missing_output_is_a_clear_failure(env: dict[str, str]) -> None:
    @dg.op
    def make() -> str:
        return "vf-1"

    @dg.op
    def use(value: str) -> str:
        return value

    @dg.job(resource_defs={"io_manager": StepOutputIOManager()})
    def two() -> None:
        use(make())

    first = two.execute_in_process()
    assert kept(env["CONNECTOR_OPS_DATABASE_URL"], first.run_id) == {f"{first.run_id}/make/result": "vf-1",
                                                                     f"{first.run_id}/use/result": "vf-1"}
    StepOutputs(env["CONNECTOR_OPS_DATABASE_URL"]).delete_runs([first.run_id])
    manager = StepOutputIOManager()
    # contexts (and the instance) closed by the test: left to the garbage collector, their resources were
    # torn down at the interpreter's exit, after SQLite's connections ("Exception during reset" noise)
    with (dg.DagsterInstance.ephemeral() as instance,
          dg.build_output_context(step_key="make", name="result", run_id=first.run_id, instance=instance) as upstream,
          dg.build_input_context(name="value", dagster_type=resolve_dagster_type(str), upstream_output=upstream,
                                 instance=instance) as context,
          pytest.raises(dg.Failure) as caught):
        manager.load_input(context)
    assert "input 'value': step output" in caught.value.description
    assert "re-execute from that step" in caught.value.description


def test_the_url_reaches_runs_as_an_environment_reference(env: dict[str, str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    manager = step_output_io_manager()
    assert isinstance(manager.database_url, dg.EnvVar)
    assert manager.database_url.env_var_name == "CONNECTOR_OPS_DATABASE_URL"
    monkeypatch.delenv("CONNECTOR_OPS_DATABASE_URL")
    unset = step_output_io_manager()
    assert unset.database_url is None  # resolved where the step runs, never the loader's SQLite path
    assert env["CONNECTOR_OPS_HOME"] not in json.dumps(unset.model_dump(), default=str)


def test_env_values_stay_out_of_the_stored_step_outputs(env: dict[str, str], tmp_path: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's resolver handed its action op the input with ``${env.…}`` substituted, and the step-output
    store pickled it into the database until gc: a secret given as the docs advise sat in cop_step_output.
    The resolver hands the variables over by name; the action op reads them where it runs."""
    from connector_ops.environment import resources_for
    from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
    from tests.pipeline_files import write

    (tmp_path / "data.csv").write_text("token\nSecretAlpha\nSecretTail9\nDefaultRow\nSecretJson7\nkept\n",
                                       encoding="utf-8")
    monkeypatch.setenv("SECRET_A", "SecretAlpha")
    monkeypatch.setenv("SECRET_TAIL", "Tail9")
    monkeypatch.setenv("SECRET_QUERY", '{"token": {"$nin": ["SecretJson7"]}}')
    path = write(tmp_path, """
        name: env_secrets
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:data.csv}"}
          - id: filtered
            action: etl.query
            input:
              virtualFileId: "${load.virtualFileId}"
              query: {token: {"$nin": ["${env.SECRET_A}", "Secret${env.SECRET_TAIL}", "${env.UNSET_X:-DefaultRow}"]}}
          - id: exact
            action: etl.query
            input: {virtualFileId: "${load.virtualFileId}", query: "${env.SECRET_QUERY}"}
        """)
    resources = {**resources_for(environ=env), "io_manager": StepOutputIOManager()}
    result = compile_pipeline(load_pipeline(path)).job.execute_in_process(resources=resources)
    assert result.output_for_node("filtered", "result") == [{"token": "SecretJson7"}, {"token": "kept"}]
    assert [r["token"] for r in result.output_for_node("exact", "result")] == [
        "SecretAlpha", "SecretTail9", "DefaultRow", "kept"]
    with get_engine(env["CONNECTOR_OPS_DATABASE_URL"]).begin() as conn:
        stored = {key: bytes(value) for key, value in conn.execute(
            sa.select(step_output.c.key, step_output.c.value).where(step_output.c.run_id == result.run_id))}
    inputs = {k: v for k, v in stored.items() if k.endswith("__input/result")}
    assert len(inputs) == 3 and b"SECRET_A" in inputs[f"{result.run_id}/filtered__input/result"]
    for secret in (b"SecretAlpha", b"Tail9", b"SecretJson7"):
        assert not any(secret in value for value in inputs.values()), secret


def test_env_fields_are_read_in_the_environment_of_the_process_running_the_action() -> None:
    """What the resolver stores holds names; a Celery worker reading it later reads its own environment."""
    from connector_ops.kernel.errors import InvalidInput
    from connector_ops.pipelines.dsl import references as r

    template = {"query": {"a": "${env.X}", "b": ["x-${env.Y}-${step.n}", "${env.Z:-[3]}"]}, "n": "${step.n}"}
    scope = r.Scope(steps={"step": {"n": 7}}, environ={"X": "[1, 2]", "Y": "why"})
    deferred = r.resolve_deferring_env(template, scope)
    stored = pickle.dumps(deferred)
    assert b"why" not in stored and b"[1, 2]" not in stored
    assert pickle.loads(stored).value({"X": "1", "Y": "w"}) == {"query": {"a": 1, "b": ["x-w-7", [3]]}, "n": 7}
    assert r.resolve(template, scope) == pickle.loads(stored).value(scope.environ)
    with pytest.raises(InvalidInput, match=r"\$\{env.X\}: environment variable X is not set"):
        deferred.value({})
    with pytest.raises(InvalidInput, match="environment variable Y is not set"):
        r.resolve_deferring_env(template, r.Scope(steps={"step": {"n": 7}}, environ={"X": "1"}))


def test_an_output_over_the_limit_fails_its_step_naming_it_and_what_to_do(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A Query's whole result wired to the next step was pickled whole into the table: past the database's
    1 GB the step failed after all its work with a raw ``string or blob too big``. Now a stored output is
    capped (``CONNECTOR_OPS_MAX_STEP_OUTPUT``, lowered here to 4 KiB) and the step fails with a 400 that
    names the step, the output, the limit and what to wire instead; nothing of it is stored."""
    monkeypatch.setenv("CONNECTOR_OPS_MAX_STEP_OUTPUT", "4KiB")
    resources = {**resources_for(environ=env), "io_manager": StepOutputIOManager()}
    rows = "id,name\n" + "".join(f"{i},customer number {i}\n" for i in range(500))
    pf = resources["platform_files"].add_bytes(rows.encode(), "c.csv", "text/csv").to_json()
    path = write(tmp_path, f"""
        name: big
        steps:
          - id: load
            action: etl.push
            input: {{platformFile: {json.dumps(pf)}}}
          - id: everything
            action: etl.query
            input: {{virtualFileId: "${{load.virtualFileId}}", query: {{}}}}
          - id: again
            action: etl.iterate
            input: {{content: "${{everything.result}}", maxBatchSize: 10}}
    """)
    outcome = run_compiled(compile_pipeline(load_pipeline(path)), resources)
    assert not outcome.success
    error = outcome.errors["everything"]
    assert error.status == 400 and error.action == "etl.query"
    assert ("step 'everything': its output 'result' (500 items) is more than 4 KiB pickled, the most a step "
            "output kept between steps may hold (CONNECTOR_OPS_MAX_STEP_OUTPUT)") in error.message
    assert "virtualFileId" in error.message and "etl.pull" in error.message
    stored = kept(env["CONNECTOR_OPS_DATABASE_URL"], outcome.result.run_id)
    assert [key.split("/", 1)[1] for key in stored] == ["load/virtual_file_id"]  # the small output is kept
    monkeypatch.setenv("CONNECTOR_OPS_MAX_STEP_OUTPUT", "2GB")  # more than the databases take: refused
    refused = run_compiled(compile_pipeline(load_pipeline(path)), resources)
    assert "CONNECTOR_OPS_MAX_STEP_OUTPUT: at most 1,000,000,000 bytes" in refused.errors["load"].message


def test_pipeline_run_caps_outputs_as_a_deployment_does(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``connector-ops pipeline run`` (and ``%pipeline run``) kept outputs in Dagster's in-memory IO manager,
    uncapped: a pipeline wiring rows whole passed locally and failed once deployed. Its outputs stay in
    memory (nothing in the step-output table) but the same cap, and the same check of the setting, apply."""
    from click.testing import CliRunner

    from connector_ops.pipelines.cli import pipeline

    rows = "id,name\n" + "".join(f"{i},customer number {i}\n" for i in range(500))
    (tmp_path / "c.csv").write_text(rows)
    path = write(tmp_path, """
        name: big_local
        steps:
          - id: load
            action: etl.push
            input: {platformFile: "${file:c.csv}"}
          - id: everything
            action: etl.query
            input: {virtualFileId: "${load.virtualFileId}", query: {}}
          - id: again
            action: etl.iterate
            input: {content: "${everything.result}", maxBatchSize: 10}
    """)
    monkeypatch.setenv("CONNECTOR_OPS_MAX_STEP_OUTPUT", "4KiB")
    said = CliRunner().invoke(pipeline, ["run", str(path)])
    assert said.exit_code == 1, said.output
    assert ("step everything failed: etl.query failed (400): step 'everything': its output 'result' (500 items) "
            "is more than 4 KiB pickled") in said.stderr
    assert "not run because of the failure: again" in said.stderr
    monkeypatch.setenv("CONNECTOR_OPS_MAX_STEP_OUTPUT", "banana")
    said = CliRunner().invoke(pipeline, ["run", str(path)])
    assert said.exit_code == 1 and "step load failed: failed (400): CONNECTOR_OPS_MAX_STEP_OUTPUT: " in said.stderr
    monkeypatch.setenv("CONNECTOR_OPS_MAX_STEP_OUTPUT", "1MiB")
    said = CliRunner().invoke(pipeline, ["run", str(path)])
    assert said.exit_code == 0, said.output
    assert 'again (etl.iterate): {"content": [{"id": "0", "name": "customer number 0"}' in said.stdout
    run_id = said.stderr.rpartition("\nrun ")[2].split()[0]
    assert len(run_id) == 36, said.stderr
    with get_engine(env["CONNECTOR_OPS_DATABASE_URL"]).connect() as conn:  # in memory: no table, or no row
        assert not sa.inspect(conn).has_table(step_output.name) or not conn.execute(
            sa.select(sa.func.count()).select_from(step_output).where(step_output.c.run_id == run_id)).scalar()


def peak_of(make: Any) -> int:
    """The most memory Python allocated while ``make()`` ran."""
    tracemalloc.start()
    try:
        make()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_pickling_stops_once_past_the_limit() -> None:
    """A value far over the limit is refused without building its whole pickle (nor the pickler's whole memo)."""
    value = [{"id": str(i), "name": f"customer {i}"} for i in range(200_000)]  # ≈ 8 MB pickled
    whole = peak_of(lambda: pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    refused = peak_of(lambda: pickled_within(value, 512 << 10))
    assert pickled_within(value, 1 << 20) is None
    assert refused < whole / 4, (refused, whole)
    assert pickle.loads(pickled_within(value[:10], 1 << 20) or b"") == value[:10]
    assert pickle.loads(pickled_within(value, 0) or b"") == value  # 0: no cap of ours


def _pickle_of_a_class_this_version_lacks() -> bytes:
    """A pickle of ``connector_ops_gone.Gone()``, as a version with that module writes it."""
    import types

    module = types.ModuleType("connector_ops_gone")
    module.Gone = type("Gone", (), {"__module__": "connector_ops_gone"})  # type: ignore[attr-defined]
    sys.modules["connector_ops_gone"] = module
    try:
        return pickle.dumps(module.Gone(), protocol=pickle.HIGHEST_PROTOCOL)  # type: ignore[attr-defined]
    finally:
        del sys.modules["connector_ops_gone"]


def test_an_output_written_by_another_version_is_a_clear_409(env: dict[str, str]) -> None:
    """A rolling upgrade: a step's output pickles a class the reading process's connector-ops does not have (a
    newer or older version wrote it). Reading it failed with pickle's bare AttributeError; it is a 409 naming
    the output, the writer's build and what to do. The build rides after the pickle, where any version's
    pickle.loads stops, so an older reader reads the value as before."""
    from connector_ops.kernel.version import build_version
    from connector_ops.ops.io_manager import build_trailer, writer_build

    gone = _pickle_of_a_class_this_version_lacks()
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(gone)
    run_id = "0f0e0d0c-0b0a-4090-8070-605040302010"
    outputs = StepOutputs(env["CONNECTOR_OPS_DATABASE_URL"])
    stamped = pickle.dumps("vf-2") + build_trailer()
    assert pickle.loads(stamped) == "vf-2" and writer_build(stamped) == build_version()
    for key, value, writer in ((f"{run_id}/make/result", gone + build_trailer(), build_version()),
                               (f"{run_id}/old/result", gone, None)):
        outputs.put(key, run_id, value if writer is None else value.replace(
            build_version().encode(), b"0.0.9+0123456789ab"))
        with (dg.DagsterInstance.ephemeral() as instance,
              dg.build_output_context(step_key=key.split("/")[1], name="result", run_id=run_id,
                                      instance=instance) as upstream,
              dg.build_input_context(name="value", dagster_type=resolve_dagster_type(str), upstream_output=upstream,
                                     instance=instance) as context,
              pytest.raises(dg.Failure) as caught):
            StepOutputIOManager().load_input(context)
        status = caught.value.metadata["status"].value
        message = caught.value.metadata["body"].value["message"]
        assert status == 409 and not caught.value.allow_retries
        assert f"input 'value': step output '{key}' cannot be read by this process (ModuleNotFoundError" in message
        assert (("written by connector-ops 0.0.9+0123456789ab," in message) if writer is not None
                else "a connector-ops version that did not record its build" in message)
        assert f"this process runs connector-ops {build_version()}" in message
        assert "re-execute the run from the start" in message
