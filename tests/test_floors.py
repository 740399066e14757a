"""The package's floors: each imports only the floors below it, Dagster only where ops live, no loops.

Floors, bottom up (docs/architecture.md):

0 kernel      ``connector_ops.kernel``: errors, platform-file model, progress, secrets, addresses, atomic write
1 resources   ``connector_ops.resources`` (the ``resources/`` folder): plain clients and stores
2 actions     models, action functions, registry, environment -> resources, sessions
3 op code     ``connector_ops.ops``: generated ops, fan-out ops, Dagster resource adapters
4 faces       the CLI and the IPython magics
5 pipelines   ``connector_ops.pipelines`` (the ``pipelines/`` folder): Definitions, DSL, runner, ``%pipeline``

Imports are read from the source (every ``import`` statement, also inside functions), so a lazy import that
reaches up fails here as well. The faces load ``connector_ops.pipelines`` commands by name, as plugins.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.servers import free_port, serving

ROOT = Path(__file__).resolve().parent.parent
#: repository folder -> installed package name (pyproject.toml's package-dir)
FOLDERS = {"connector_ops": "connector_ops", "resources": "connector_ops.resources",
           "pipelines": "connector_ops.pipelines"}
FACES = ("connector_ops.cli", "connector_ops.drive.cli", "connector_ops.display", "connector_ops.magic",
         "connector_ops.magic_frames", "connector_ops.magic_input", "connector_ops.magic_session",
         "connector_ops.store_cli")
#: floors by module prefix; the longest matching prefix decides
FLOORS = {
    "connector_ops.kernel": 0,
    "connector_ops.resources": 1,
    "connector_ops": 2,
    "connector_ops.ops": 3,
    **dict.fromkeys(FACES, 4),
    "connector_ops.pipelines": 5,
}
DAGSTER_FLOORS = {3, 5}


def project_modules() -> dict[str, Path]:
    modules = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if name.startswith("connector_ops.resources") and folder == "connector_ops":
                continue
            modules[name] = path
    return modules


def floor_of(module: str) -> int:
    best = max((p for p in FLOORS if module == p or module.startswith(p + ".")), key=len)
    return FLOORS[best]


def imports_of(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import statement, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:  # `from pkg import module` imports pkg.module when it is one
                yield node.lineno, f"{base}.{alias.name}"


def resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The project module an import names (``pkg.mod.attr`` -> ``pkg.mod``), or None if not ours."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def import_graph() -> dict[str, dict[str, int]]:
    modules = project_modules()
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for line, target in imports_of(path, module):
            found = resolve(target, modules)
            if found and found != module and not module.startswith(found + "."):  # a package's own parent
                edges.setdefault(found, line)
    return graph


def test_every_folder_with_modules_is_an_installed_package() -> None:
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {m for m, p in project_modules().items() if p.name == "__init__.py"}
    assert found == packages, "pyproject.toml [tool.setuptools] packages must list every package folder"


def test_no_floor_imports_a_higher_one() -> None:
    wrong = [f"{m} (floor {floor_of(m)}) imports {t} (floor {floor_of(t)}) at line {line}"
             for m, edges in import_graph().items() for t, line in edges.items() if floor_of(t) > floor_of(m)]
    assert wrong == []


def test_dagster_is_imported_only_by_op_code_and_pipelines() -> None:
    wrong = []
    for module, path in project_modules().items():
        for line, target in imports_of(path, module):
            if (target == "dagster" or target.startswith(("dagster.", "dagster_"))) \
                    and floor_of(module) not in DAGSTER_FLOORS:
                wrong.append(f"{module}:{line} imports {target}")
    assert wrong == []


def test_no_generic_top_level_names_are_imported() -> None:
    wrong = [f"{module}:{line} imports {target}"
             for module, path in project_modules().items() for line, target in imports_of(path, module)
             if target.split(".")[0] in ("resources", "pipelines")]
    assert wrong == []


def test_no_import_loops_between_files() -> None:
    graph = import_graph()
    loops: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for target in graph.get(node, {}):
            if state.get(target) == 1:
                loops.append([*trail[trail.index(target):], target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert loops == []


def _imported_modules(code: str, tmp_path: Path) -> set[str]:
    env = {**os.environ, "CONNECTOR_OPS_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_invoke_imports_no_dagster(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        from connector_ops import ConnectorError, invoke
        assert invoke("etl.iterate", {"content": [1, 2, 3], "maxBatchSize": 5})["content"] == [1, 2, 3]
        try:
            invoke("etl.iterate", {"content": "no-such-file", "maxBatchSize": 5})  # reaches the database
        except ConnectorError as exc:
            assert exc.status == 404
    """)
    imported = _imported_modules(code, tmp_path)
    assert "connector_ops.registry" in imported
    assert not [m for m in imported if m.split(".")[0] in ("dagster", "pandas")]


# -- a user's folder with its own `resources.py` and `pipelines/` ---------------------------------------------

@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A notebook/Dagster project folder as users have them: their own ``resources.py`` and ``pipelines/``."""
    folder = tmp_path / "project"
    (folder / "pipelines").mkdir(parents=True)
    (folder / "resources.py").write_text("RAISE_IF_OURS = 'the user resources module'\n")
    (folder / "pipelines" / "__init__.py").write_text("USER_PIPELINES = True\n")
    return folder


def _env(folder: Path) -> dict[str, str]:
    return {**os.environ, "CONNECTOR_OPS_HOME": str(folder / ".connector_ops"), "PYTHONPATH": str(folder)}


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_cli_runs_in_a_folder_with_its_own_resources_and_pipelines(user_folder: Path) -> None:
    run = subprocess.run([_bin("connector-ops"), "invoke", "etl.iterate", '{"content": [1, 2], "maxBatchSize": 1}'],
                         capture_output=True, text=True, cwd=user_folder, env=_env(user_folder), timeout=120)
    assert run.returncode == 0, run.stderr
    assert '"hasNext": true' in run.stdout
    run = subprocess.run([_bin("connector-ops"), "pipeline", "list"], capture_output=True, text=True,
                         cwd=user_folder, env=_env(user_folder), timeout=120)
    assert run.returncode == 0, run.stderr
    assert "sales_report" in run.stdout


def test_magics_run_in_a_folder_with_its_own_resources_and_pipelines(user_folder: Path) -> None:
    code = textwrap.dedent("""
        import resources, pipelines
        assert resources.RAISE_IF_OURS and pipelines.USER_PIPELINES  # the user's modules are theirs
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_line_magic("load_ext", "connector_ops")
        out = shell.run_line_magic("etl", 'iterate {"content": [1, 2, 3], "maxBatchSize": 2}')
        assert out["content"] == [1, 2], out
        assert "pipeline" in shell.magics_manager.magics["line"]
        import resources as again
        assert again.RAISE_IF_OURS
        print("ok")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=user_folder,
                         env=_env(user_folder), timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("ok")


def test_dagster_dev_serves_our_jobs_from_a_folder_with_its_own_pipelines(user_folder: Path) -> None:
    """Also: the webserver and daemon a test starts send no telemetry (on a fresh DAGSTER_HOME they would upload
    it at once, from child processes the socket net of tests/loopback_only.py does not reach)."""
    uploads: list[str] = []

    async def telemetry(scope: dict, receive: Any, send: Any) -> None:
        uploads.append(f"{scope['method']} {scope['path']}")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    port = free_port()
    (user_folder / "dagster_home").mkdir()
    with serving(telemetry) as collector:
        env = {**_env(user_folder), "DAGSTER_HOME": str(user_folder / "dagster_home"),
               "DAGSTER_TELEMETRY_URL": f"{collector}/actions"}
        _serves_our_jobs(env, user_folder, port)
    assert not uploads, f"telemetry left the test: {uploads}"


def _serves_our_jobs(env: dict[str, str], user_folder: Path, port: int) -> None:
    command = [_bin("dagster"), "dev", "-m", "connector_ops.pipelines", "-h", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(command, cwd=user_folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        query = "{ repositoriesOrError { ... on RepositoryConnection { nodes { jobs { name } } } } }"
        deadline, jobs, answer = time.monotonic() + 150, set(), None
        while time.monotonic() < deadline and "sales_report" not in jobs:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else "dagster dev exited"
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/graphql", json={"query": query}, timeout=10).json()
                nodes = answer["data"]["repositoriesOrError"].get("nodes", [])
                jobs = {job["name"] for node in nodes for job in node["jobs"]}
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                answer = answer if answer is not None else repr(exc)
            if "sales_report" not in jobs:
                time.sleep(1)
        assert "sales_report" in jobs, f"last answer: {str(answer)[:2000]}"
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
