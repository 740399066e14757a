"""A YAML pipeline as a Dagster Component (#12 item 6): a real ``dg`` project, the real ``dg`` CLI.

Each test writes a project as ``dg`` scaffolds one (``pyproject.toml`` with ``[tool.dg]``, ``src/<module>/
definitions.py`` loading the ``defs/`` folder) with ``defs.yaml`` files of our component type, then runs ``dg``
in a subprocess — with the suite's loopback-only net installed there too (a ``sitecustomize`` on its path),
telemetry off and its own HOME and DAGSTER_HOME — or loads the folder in process and executes the job.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster.components.testing.utils import component_defs

from connector_ops.environment import resources_for
from connector_ops.pipelines.components import PipelineComponent
from connector_ops.pipelines.components.pipeline import VALIDATING_VARIABLE
from connector_ops.pipelines.components.scaffold import EXAMPLE_CSV, PIPELINE_FILE, STARTER, pipeline_name
from connector_ops.pipelines.dsl import compile_pipeline, load_pipeline
from tests.test_pipelines_sales_report import INVALID_ROWS, check_outputs

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = ROOT / "pipelines"
TYPE = "connector_ops.pipelines.components.PipelineComponent"
DG = Path(sys.executable).with_name("dg")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


class Project:
    """A ``dg`` project folder (the layout ``dg scaffold project`` writes) with a unique root module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.module = f"dg_project_{uuid.uuid4().hex[:8]}"
        self.package = root / "src" / self.module
        self.defs = self.package / "defs"
        _write(root / "pyproject.toml", f"""
            [project]
            name = "{self.module.replace('_', '-')}"
            version = "0.1.0"
            requires-python = ">=3.11"
            dependencies = ["connector-ops"]

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "{self.module}"
            """)
        _write(self.package / "__init__.py", "")
        _write(self.package / "definitions.py", """
            from pathlib import Path

            import dagster as dg


            @dg.definitions
            def defs() -> dg.Definitions:
                return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
            """)
        _write(self.defs / "__init__.py", "")

    def component(self, folder: str, attributes: str, files: dict[str, str] | None = None) -> Path:
        """``defs/<folder>/defs.yaml`` of our type with ``attributes`` (YAML), and files beside it."""
        body = textwrap.indent(textwrap.dedent(attributes).strip(), "  ")
        path = _write(self.defs / folder / "defs.yaml", f"type: {TYPE}\nattributes:\n{body}\n")
        for name, text in (files or {}).items():
            _write(path.parent / name, text)
        return path

    def copy_sales_report(self, folder: str = "sales") -> Path:
        """The shipped demo pipeline and its data, as a user copies them into a component folder."""
        self.component(folder, "path: sales_report.yaml")
        target = self.defs / folder
        (target / "sales_report.yaml").write_bytes((PIPELINES / "sales_report.yaml").read_bytes())
        for data in (PIPELINES / "data").iterdir():
            _write(target / "data" / data.name, data.read_text(encoding="utf-8"))
        return target

    def dg(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """The real ``dg`` CLI in this project, offline: only loopback sockets, no telemetry."""
        site = self.root.parent / f"{self.root.name}-site"
        _write(site / "sitecustomize.py", """
            from tests import loopback_only

            loopback_only.install()  # the suite's net, in dg's process and every Python it starts
            """)
        home = self.root.parent / f"{self.root.name}-home"
        (home / "dagster").mkdir(parents=True, exist_ok=True)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "PYTHONPATH"))}
        env = {
            **clean,
            "PYTHONPATH": os.pathsep.join([str(site), str(self.root / "src"), str(ROOT)]),
            "HOME": str(home),
            "DAGSTER_HOME": str(home / "dagster"),
            "DAGSTER_DISABLE_TELEMETRY": "1",
            "NO_COLOR": "1",
            "COLUMNS": "250",
            **(extra_env or {}),
        }
        return subprocess.run([str(DG), *args], cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=300, check=False)

    def load(self) -> dg.Definitions:
        """The Definitions of the ``defs/`` folder, loaded in this process as a code server would."""
        sys.path.insert(0, str(self.root / "src"))
        try:
            return dg.load_from_defs_folder(path_within_project=self.package)
        finally:
            sys.path.remove(str(self.root / "src"))


def _causes(exc: BaseException) -> str:
    """The messages of ``exc`` and the exceptions it was raised from (Dagster wraps a component's error)."""
    texts = [str(exc)]
    while exc.__cause__ is not None:
        exc = exc.__cause__
        texts.append(str(exc))
    return "\n".join(texts)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path / "project")


@pytest.fixture
def validating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Load as ``dg check defs`` does (its variable set): a broken pipeline fails the load instead of
    becoming a ``broken_pipelines__<folder>`` job."""
    monkeypatch.setenv(VALIDATING_VARIABLE, "1")


#: an inline pipeline mixing Dagster's load-time templates with our run-time references
INLINE = """
    pipeline:
      name: "customers_{{ env.DG_TEST_REGION | lower }}"  # set in every test that loads it: unset fails
      description: "Customers of {{ env('DG_TEST_REGION') }}"
      tags: {year: "2024", region: "{{ env.DG_TEST_REGION }}"}
      steps:
        - id: load
          action: etl.push
          asset: "customers/{{ env.DG_TEST_REGION | lower }}"
          input:
            platformFile: "${file:data/customers.csv}"
            parameters: {useFirstRowAsSchema: true, csvDelimiter: ","}
        - id: export
          action: etl.pull
          input:
            virtualFileId: "${load.virtualFileId}"
            exportType: csv
            exportName: "{{ env.DG_TEST_REGION }}-${env.DG_TEST_SUFFIX:-none}.csv"
    """


def test_dg_lists_our_component_type(project: Project) -> None:
    listed = project.dg("list", "components", "--json")
    assert listed.returncode == 0, listed.stderr
    items = json.loads(listed.stdout)
    items = items["items"] if isinstance(items, dict) else items
    ours = [item for item in items if TYPE in json.dumps(item)]
    assert ours, f"{TYPE} not in dg list components: {listed.stdout[:2000]}"
    assert "connector-ops YAML pipeline" in json.dumps(ours[0])


def test_dg_check_defs_passes_and_list_defs_shows_the_pipelines(project: Project) -> None:
    """Two components in one project (a copied file and an inline pipeline) share our resources."""
    project.copy_sales_report()
    project.component("north", INLINE, {"data/customers.csv": (PIPELINES / "data" / "customers.csv").read_text()})
    project.component("inbox", 'path: "{{ env.DG_TEST_PIPELINES }}/drive_inbox.yaml"')  # a template in a path
    env = {"DG_TEST_REGION": "North", "DG_TEST_PIPELINES": str(PIPELINES)}

    checked = project.dg("check", "defs", extra_env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "All definitions loaded successfully" in checked.stdout

    listed = project.dg("list", "defs", "--json", extra_env=env)
    assert listed.returncode == 0, listed.stderr
    defs = json.loads(listed.stdout)
    jobs = {job["name"]: job for job in defs["jobs"]}
    assert set(jobs) == {"sales_report", "customers_north", "drive_inbox"}
    assert jobs["customers_north"]["description"] == "Customers of North"  # {{ env.X }} rendered at load
    assert jobs["sales_report"]["source"].endswith("defs/sales/defs.yaml:1")
    assets = {asset["asset_key"]: asset for asset in defs["assets"]}
    assert set(assets) == {"sales/orders", "sales/customers", "sales/valid_orders", "sales/report_csv",
                           "customers/north"}
    assert set(assets["sales/report_csv"]["dependency_keys"]) == {"sales/valid_orders", "sales/customers"}
    assert [check["key"] for check in defs["asset_checks"]] == ["sales/orders:validate"]
    assert [s["name"] for s in defs["schedules"]] == ["sales_report_schedule"]
    assert [s["name"] for s in defs["sensors"]] == ["drive_inbox_on_new_file"]
    assert {r["name"] for r in defs["resources"]} == {"platform_files", "virtual_files", "drive", "mail",
                                                     "io_manager"}


def test_dg_check_defs_fails_with_the_located_problem(project: Project) -> None:
    """A broken pipeline file and a broken inline pipeline: our file:line and step, exit 1."""
    project.component("broken_file", "path: pipeline.yaml", {"pipeline.yaml": """
        name: broken
        steps:
          - id: load
            action: etl.pushh
            input: {}
        """})
    checked = project.dg("check", "defs")
    assert checked.returncode == 1
    pipeline_file = project.defs / "broken_file" / "pipeline.yaml"
    assert f"{pipeline_file}:4: step load: unknown action 'etl.pushh'" in checked.stdout + checked.stderr

    (project.defs / "broken_file" / "defs.yaml").unlink()
    inline = project.component("broken_inline", """
        pipeline:
          name: broken_inline
          steps:
            - id: load
              action: etl.push
              input: {platformFile: "${file:nowhere.csv}"}
            - id: export
              action: etl.pull
              input: {virtualFileId: "${lod.virtualFileId}", exportType: csv}
        """)
    checked = project.dg("check", "defs")
    assert checked.returncode == 1
    output = checked.stdout + checked.stderr
    assert f"{inline}:8: step load:" in output and "nowhere.csv" in output  # lines of defs.yaml
    assert f"{inline}:11: step export: ${{lod.virtualFileId}}: there is no step 'lod'" in output


def test_both_or_neither_source_is_refused(project: Project) -> None:
    project.component("both", "path: a.yaml\npipeline: {name: x, steps: []}")
    checked = project.dg("check", "defs")
    assert checked.returncode == 1
    assert "give exactly one of `path` (a pipeline file) and `pipeline` (the pipeline inline)" in \
        checked.stdout + checked.stderr


def test_sales_report_component_runs_in_process(project: Project, env: dict[str, str]) -> None:
    """The demo loaded from a ``defs/`` folder runs on the component's own resources (both databases)."""
    project.copy_sales_report()
    defs = project.load()
    job = defs.resolve_job_def("sales_report")
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(instance=instance)  # resources and io_manager: the component's
    assert result.success
    check_outputs(result.output_for_node, resources_for(environ=env))
    [check] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert check.asset_key == dg.AssetKey(["sales", "orders"]) and check.passed
    assert check.metadata["rejected_count"].value == INVALID_ROWS
    assert instance.fetch_materializations(dg.AssetKey(["sales", "report_csv"]), limit=5).records


def test_load_time_templates_and_run_time_references_coexist(
        project: Project, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``{{ env.X }}`` is read when the folder loads; ``${step.field}`` and ``${env.X}`` when the step runs;
    a quoted "2024" stays text (Dagster's native rendering is applied only to strings with a template)."""
    project.component("north", INLINE, {"data/customers.csv": (PIPELINES / "data" / "customers.csv").read_text()})
    monkeypatch.setenv("DG_TEST_REGION", "North")
    monkeypatch.delenv("DG_TEST_SUFFIX", raising=False)
    defs = project.load()
    monkeypatch.setenv("DG_TEST_REGION", "South")  # too late for the load: the job is already built
    monkeypatch.setenv("DG_TEST_SUFFIX", "weekly")  # read by the step when it runs
    job = defs.resolve_job_def("customers_north")
    assert job.tags["year"] == "2024" and job.tags["region"] == "North"
    result = job.execute_in_process(instance=dg.DagsterInstance.ephemeral())
    assert result.success
    exported = result.output_for_node("export", "platform_file")
    assert exported["name"] == "North-weekly.csv"
    files = resources_for(environ=env)["platform_files"]
    shipped = (PIPELINES / "data" / "customers.csv").read_bytes()
    assert files.read_bytes(exported).splitlines()[0] == shipped.splitlines()[0]
    assert len(files.read_bytes(exported).splitlines()) == len(shipped.splitlines())
    materialized = [e.event_specific_data.materialization.asset_key for e in result.all_events
                    if e.event_type_value == "ASSET_MATERIALIZATION"]
    assert materialized == [dg.AssetKey(["customers", "north"])]


def test_a_time_of_day_stays_text_inline_and_in_set(project: Project, env: dict[str, str]) -> None:
    """Dagster reads ``defs.yaml`` with YAML 1.1's base-60 numbers: an inline step's ``closes: 17:45`` reached
    the pipeline as 1065 (``09:30`` as text), and Validate refused it as "not a string". Inline and in
    ``set:`` it is now the text written, as in a pipeline file."""
    project.component("hours", """
        pipeline:
          name: opening_hours
          steps:
            - id: hours
              action: etl.validate
              input:
                content: [{opens: 09:30, closes: 17:45}]
                schema: {opens: {type: string}, closes: {type: string, required: true}}
            - id: breaks
              action: etl.validate
              input:
                content: []
                schema: {lunch: {type: string, required: true}, late: {type: string}}
        set:
          breaks.content: [{lunch: 12:00:00, late: 23:59.5}]
        """)
    result = project.load().resolve_job_def("opening_hours").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    assert result.output_for_node("hours", "validated") == [{"opens": "09:30", "closes": "17:45"}]
    assert result.output_for_node("breaks", "validated") == [{"lunch": "12:00:00", "late": "23:59.5"}]
    assert result.output_for_node("hours", "rejected") == result.output_for_node("breaks", "rejected") == []


def test_a_missing_variable_fails_the_load_naming_it(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.component("north", 'path: "{{ env(\'DG_TEST_MISSING\') }}/p.yaml"')
    monkeypatch.delenv("DG_TEST_MISSING", raising=False)
    with pytest.raises(Exception, match="Error while loading component north") as failed:
        project.load()
    assert "Environment variable DG_TEST_MISSING is not set" in _causes(failed.value)


@pytest.mark.parametrize("written", ["{{ env.DG_TEST_DIR }}/p.yaml", "{{ env('DG_TEST_DIR') }}/p.yaml",
                                     "{{ env.DG_TEST_FILE }}"])
def test_path_renders_the_environment_as_pipeline_and_set_do(
        project: Project, monkeypatch: pytest.MonkeyPatch, validating: None, written: str) -> None:
    """``path: "{{ env.X }}"`` reached the component as None (refused as naming neither ``path`` nor
    ``pipeline``) and ``"{{ env.X }}/p.yaml"`` as ``None/p.yaml`` when X was unset: Dagster rendered it before
    our resolver. Set, the variable's value names the file; unset, the load fails naming the variable and,
    on its line of ``defs.yaml``, the field — ``env('X')`` too, which Dagster refused without saying where."""
    variable = "DG_TEST_FILE" if "FILE" in written else "DG_TEST_DIR"
    defs_yaml = project.component("north", f'path: "{written}"', {
        "pipes/p.yaml": (PIPELINES / "retail_customers.yaml").read_text(),
        "pipes/data/customers.csv": (PIPELINES / "data" / "customers.csv").read_text()})
    monkeypatch.setenv("DG_TEST_DIR", "pipes")
    monkeypatch.setenv("DG_TEST_FILE", "pipes/p.yaml")
    assert project.load().resolve_job_def("retail_customers").name == "retail_customers"

    monkeypatch.delenv(variable)
    with pytest.raises(Exception, match="Error while loading component north") as failed:
        project.load()
    text = _causes(failed.value)
    assert f"{defs_yaml}:3 - attributes.path" in text
    assert re.search(f"[Ee]nvironment variable {variable} is not set", text), text
    assert "None" not in text, text


def test_an_unset_variable_written_by_env_dot_fails_the_load_on_its_line(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """``{{ env.X }}`` of an unset variable inside a longer string wrote the text ``None`` (job
    ``customers_none``): in ``pipeline:`` and ``set:`` it fails the load naming the variable, on its line."""
    monkeypatch.delenv("DG_TEST_UNSET", raising=False)
    inline = project.component("north", """
        pipeline:
          name: "customers_{{ env.DG_TEST_UNSET | lower }}"
          steps:
            - {id: query, action: etl.query, input: {virtualFileId: x, query: {}}}
        """)
    with pytest.raises(Exception, match="Error while loading component north") as failed:
        project.load()
    text = _causes(failed.value)
    assert f"{inline}:4 - attributes.pipeline.name" in text
    assert "environment variable DG_TEST_UNSET is not set (`env.DG_TEST_UNSET`)" in text

    inline.unlink()
    in_set = project.component("east", """
        path: pipeline.yaml
        set:
          export.exportName: "{{ env.DG_TEST_UNSET }}-customers.csv"
        """, {"pipeline.yaml": (PIPELINES / "retail_customers.yaml").read_text()})
    with pytest.raises(Exception, match="Error while loading component east") as failed:
        project.load()
    assert f"{in_set}:5 - attributes.set.export.exportName" in _causes(failed.value)
    assert "environment variable DG_TEST_UNSET is not set" in _causes(failed.value)


def test_an_unset_variable_with_a_default_or_a_test_still_loads(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """What Jinja offers for an optional variable keeps working: a default, ``or``, ``{% if %}``."""
    monkeypatch.delenv("DG_TEST_UNSET", raising=False)
    project.component("north", """
        pipeline:
          name: "customers_{{ env.DG_TEST_UNSET | default('eu') }}"
          description: "{{ env.DG_TEST_UNSET or 'all regions' }}{% if env.DG_TEST_UNSET %} only{% endif %}"
          steps:
            - {id: query, action: etl.query, input: {virtualFileId: x, query: {}}}
        """)
    job = project.load().resolve_job_def("customers_eu")
    assert job.description == "all regions"


def test_resources_false_leaves_resources_to_the_project(project: Project) -> None:
    """``resources: false``: the project's own resource under our key, no merge conflict, no executor of ours."""
    project.component("plain", "path: p.yaml\nresources: false", {"p.yaml": """
        name: plain
        steps:
          - id: query
            action: etl.query
            input: {virtualFileId: x, query: {}}
        """})
    _write(project.defs / "project_resources.py", """
        import dagster as dg

        from connector_ops.ops.resources import VirtualFileStoreAdapter


        @dg.definitions
        def resources() -> dg.Definitions:
            return dg.Definitions(resources={"virtual_files": VirtualFileStoreAdapter(database_url=dg.EnvVar("MY_DB"))})
        """)
    defs = project.load()
    assert defs.resolve_job_def("plain").name == "plain"
    assert set(defs.resources or {}) == {"virtual_files"} and defs.executor is None
    assert defs.resources["virtual_files"].database_url == dg.EnvVar("MY_DB")


def test_a_component_built_in_python() -> None:
    """The same type from Python code: a pipeline as a mapping, or a file by absolute path."""
    inline = PipelineComponent(pipeline={"name": "from_python", "steps": [
        {"id": "query", "action": "etl.query", "input": {"virtualFileId": "x", "query": {"a": "${env.A}"}}}]})
    by_path = PipelineComponent(path=str(PIPELINES / "retail_customers.yaml"))
    defs = dg.Definitions.merge(component_defs(component=inline), component_defs(component=by_path))
    assert {job.name for job in defs.jobs or []} == {"from_python", "retail_customers"}
    assert set(defs.resources or {}) == {"platform_files", "virtual_files", "drive", "mail", "io_manager"}
    with pytest.raises(ValueError, match="give exactly one of `path`"):
        PipelineComponent()


def test_dg_scaffold_defs_writes_a_pipeline_that_runs(project: Project, env: dict[str, str]) -> None:
    """``dg scaffold defs OUR_TYPE weekly-report``: defs.yaml, a starter pipeline and its data; it checks and runs."""
    scaffolded = project.dg("scaffold", "defs", TYPE, "weekly-report")
    assert scaffolded.returncode == 0, scaffolded.stdout + scaffolded.stderr
    folder = project.defs / "weekly-report"
    assert "path: pipeline.yaml" in (folder / "defs.yaml").read_text()
    assert "name: weekly_report" in (folder / "pipeline.yaml").read_text()
    checked = project.dg("check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    result = project.load().resolve_job_def("weekly_report").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    files = resources_for(environ=env)["platform_files"]
    exported = files.read_bytes(result.output_for_node("export", "platform_file"))
    assert [line.split(",")[0] for line in exported.decode().splitlines()] == ["order_id", "A-1", "A-3"]


@pytest.mark.parametrize(("folder", "name"), [
    ("ventes-\u00e9t\u00e9", "ventes_ete"), ("stra\u00dfe", "strasse"), ("2024 sales", "p_2024_sales"),
    ("\u65e5\u672c", "pipeline"), ("class", "class_pipeline")])
def test_the_scaffolder_names_the_pipeline_so_that_it_loads(tmp_path: Path, folder: str, name: str) -> None:
    """A folder name with letters Dagster refuses in a job name (accents, other scripts, a keyword): the
    starter pipeline gets an ASCII name and asset key, and the file validates and compiles."""
    assert pipeline_name(tmp_path / folder) == name
    path = _write(tmp_path / folder / PIPELINE_FILE, STARTER.format(name=pipeline_name(tmp_path / folder)))
    _write(path.parent / "data" / "example.csv", EXAMPLE_CSV)
    compiled = compile_pipeline(load_pipeline(path))
    assert compiled.job.name == name and [a.key for a in compiled.assets] == [dg.AssetKey([name, "orders"])]


def test_set_fills_a_pipeline_file_when_the_project_loads(
        project: Project, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """One pipeline file, values per project: ``set:`` edits step inputs with ``{{ env('X') }}`` at load."""
    folder = project.defs / "east"
    project.component("east", """
        path: pipeline.yaml
        set:
          export.exportName: "{{ env('DG_TEST_REGION') }}-customers.csv"
          drop_others.request: {region: {$ne: "{{ env('DG_TEST_REGION') }}"}}
        """)
    (folder / "pipeline.yaml").write_bytes((PIPELINES / "retail_customers.yaml").read_bytes())
    _write(folder / "data" / "customers.csv", (PIPELINES / "data" / "customers.csv").read_text())
    monkeypatch.setenv("DG_TEST_REGION", "East")
    result = project.load().resolve_job_def("retail_customers").execute_in_process(
        instance=dg.DagsterInstance.ephemeral())
    assert result.success
    exported = result.output_for_node("export", "platform_file")
    assert exported["name"] == "East-customers.csv"
    rows = resources_for(environ=env)["platform_files"].read_bytes(exported).decode().splitlines()[1:]
    assert len(rows) == 8 and all(",East," in row for row in rows)  # the 8 East customers of the shipped file


def test_a_missing_pipeline_file_is_reported_on_the_path_line(project: Project, validating: None) -> None:
    """Not as line 1 of a file that does not exist: on the line of ``path:`` in ``defs.yaml``."""
    defs_yaml = project.component("gone", "resources: false\npath: nothere.yaml")
    with pytest.raises(Exception, match="Error while building definitions for gone") as failed:
        project.load()
    assert (f"{defs_yaml}:4: `path` 'nothere.yaml': no pipeline file at {defs_yaml.parent / 'nothere.yaml'}"
            in _causes(failed.value))


def test_a_set_key_naming_no_step_is_reported_on_its_line(project: Project, validating: None) -> None:
    defs_yaml = project.component("typo", """
        path: pipeline.yaml
        set:
          expor.exportName: x.csv
          nodot: 1
        """, {"pipeline.yaml": (PIPELINES / "retail_customers.yaml").read_text()})
    with pytest.raises(Exception, match="Error while building definitions for typo") as failed:
        project.load()
    text = _causes(failed.value)
    assert f"{defs_yaml}:5: set 'expor.exportName': there is no step 'expor'" in text
    assert f"{defs_yaml}:6: set 'nodot': name a step's input field: step.field[.sub]" in text


def test_a_set_value_the_step_refuses_is_reported_on_its_line(project: Project, validating: None) -> None:
    """A field the action does not have, or a value it refuses, set by ``set:``: on that key's line of
    ``defs.yaml``, not on the step's line of the pipeline file (where nothing is wrong)."""
    defs_yaml = project.component("typo", """
        path: pipeline.yaml
        set:
          export.exportNam: x.csv
          export.exportType: xls
        """, {"pipeline.yaml": (PIPELINES / "retail_customers.yaml").read_text(),
              "data/customers.csv": (PIPELINES / "data" / "customers.csv").read_text()})
    with pytest.raises(Exception, match="Error while building definitions for typo") as failed:
        project.load()
    text = _causes(failed.value)
    assert f"{defs_yaml}:5: step export: set 'export.exportNam': unknown field 'exportNam' in etl.pull input" in text
    assert f"{defs_yaml}:6: step export: set 'export.exportType': exportType: Input should be 'json'" in text
    assert "pipeline.yaml:" not in text


def test_a_set_key_into_a_value_that_is_no_mapping_is_reported_on_its_line(project: Project,
                                                                           validating: None) -> None:
    defs_yaml = project.component("deep", """
        path: pipeline.yaml
        set:
          load.platformFile.name: x.csv
        """, {"pipeline.yaml": (PIPELINES / "retail_customers.yaml").read_text()})
    with pytest.raises(Exception, match="Error while building definitions for deep") as failed:
        project.load()
    assert (f"{defs_yaml}:5: set 'load.platformFile.name': load.platformFile holds a str, not a mapping of "
            "fields" in _causes(failed.value))


def test_a_project_merging_the_shipped_pipelines_with_its_components_loads(project: Project) -> None:
    """``Definitions.merge(components, connector_ops.pipelines.defs)``: both carry the same resource, IO
    manager and executor objects, so Dagster merges them instead of refusing two objects under one key."""
    _write(project.package / "definitions.py", """
        from pathlib import Path

        import dagster as dg

        from connector_ops.pipelines import defs as shipped


        @dg.definitions
        def defs() -> dg.Definitions:
            return dg.Definitions.merge(dg.load_from_defs_folder(path_within_project=Path(__file__).parent), shipped)
        """)
    project.copy_sales_report("my_sales")  # the same file, as another job name would clash: rename it
    pipeline = project.defs / "my_sales" / "sales_report.yaml"
    pipeline.write_text(pipeline.read_text(encoding="utf-8").replace("name: sales_report", "name: my_sales", 1)
                        .replace("asset: sales/", "asset: my_sales/"), encoding="utf-8")
    checked = project.dg("check", "defs")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = project.dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stderr
    jobs = {job["name"] for job in json.loads(listed.stdout)["jobs"]}
    assert {"my_sales", "sales_report", "first_etl"} <= jobs


def test_a_broken_component_costs_its_own_job_only_but_fails_dg_check_defs(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a running code location a broken pipeline becomes ``broken_pipelines__<folder>`` (its problems in
    the description and in the failure of a launch) and every other component still loads; ``dg check defs``
    still exits 1 with the located problem, so CI stops it."""
    monkeypatch.delenv(VALIDATING_VARIABLE, raising=False)
    project.copy_sales_report()
    broken = project.defs / "nightly" / "pipeline.yaml"
    project.component("nightly", "path: pipeline.yaml", {"pipeline.yaml": """
        name: nightly
        steps:
          - id: export
            action: etl.pulll
            input: {virtualFileId: x, exportType: csv}
        """})
    problem = f"{broken}:4: step export: unknown action 'etl.pulll'"

    defs = project.load()
    assert defs.resolve_job_def("sales_report").name == "sales_report"
    assert [s.name for s in defs.schedules or []] == ["sales_report_schedule"]  # the good one still scheduled
    placeholder = defs.resolve_job_def("broken_pipelines__nightly")
    assert problem in (placeholder.description or "")
    result = placeholder.execute_in_process(raise_on_error=False)
    [failed] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert problem in failed.event_specific_data.error.message

    listed = project.dg("list", "defs", "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert {job["name"] for job in json.loads(listed.stdout)["jobs"]} == {"sales_report", "broken_pipelines__nightly"}
    checked = project.dg("check", "defs")
    assert checked.returncode == 1
    assert problem in checked.stdout + checked.stderr


def test_a_name_another_component_took_names_that_component(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster's own error ("conflicting AssetSpecs with the same key") named neither component: the second
    component to take a job name or an asset key gets our problem naming the first, and only it is broken."""
    push = 'steps:\n  - {id: q, action: etl.push, asset: shared/rows, input: {platformFile: "${file:c.csv}"}}\n'
    for folder, name in (("first", "weekly"), ("second", "weekly"), ("third", "other")):
        project.component(folder, "path: p.yaml", {"p.yaml": f"name: {name}\n{push}", "c.csv": "a,b\n"})
    monkeypatch.delenv(VALIDATING_VARIABLE, raising=False)
    defs = project.load()
    assert defs.resolve_job_def("weekly").name == "weekly"
    second = defs.resolve_job_def("broken_pipelines__second").description or ""
    assert f"{project.defs / 'second' / 'p.yaml'}:1: job name 'weekly' is already used by the component " \
           f"{project.defs / 'first'}" in second
    third = defs.resolve_job_def("broken_pipelines__third").description or ""
    assert f"{project.defs / 'third' / 'p.yaml'}:3: step q: asset 'shared/rows' is already made by " \
           f"{project.defs / 'first' / 'p.yaml'} (step q)" in third

    monkeypatch.setenv(VALIDATING_VARIABLE, "1")
    with pytest.raises(Exception, match="Error while building definitions for second") as failed:
        project.load()
    assert "job name 'weekly' is already used by the component" in _causes(failed.value)
