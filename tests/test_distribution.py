"""What `pip install connector-ops` gets: the wheel and sdist built from this tree, and the main job run from it.

Every other test (and `.ci/run`, and the README's set-up) uses the editable install, which reads files straight
from the checkout: a file the package needs but the wheel leaves out goes unnoticed there (the sample CSVs of
``pipelines/data/`` once did, and the README's main job failed for every pip, pipx and container user).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: repository folder -> where its files land in the wheel (pyproject.toml's package-dir)
INSTALLED_AS = {"connector_ops": "connector_ops", "resources": "connector_ops/resources",
                "pipelines": "connector_ops/pipelines"}
#: what a checkout holds that is no part of the project's files
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc",
                                    ".connector_ops", ".pytest_cache", ".ruff_cache", ".mypy_cache",
                                    ".ipynb_checkpoints")
#: folders the sdist carries whole, so that its tests run and the files the docs point to are there
SDIST_FOLDERS = ("tests", "docs", "deploy", "notebooks", "benchmarks")


def _source_files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(source copy, wheel, sdist), built with the PEP 517 hooks pip calls, from a copy of this tree."""
    work = tmp_path_factory.mktemp("dist")
    source, out = work / "src", work / "out"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    out.mkdir()
    hooks = "import sys, setuptools.build_meta as b; out = sys.argv[1]; b.build_wheel(out); b.build_sdist(out)"
    run = subprocess.run([sys.executable, "-c", hooks, str(out)], cwd=source, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    return source, wheel, sdist


def test_the_wheel_holds_every_file_of_the_package_folders(built: tuple[Path, Path, Path]) -> None:
    source, wheel, _ = built
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    missing = sorted(f"{folder}/{name}" for folder, installed in INSTALLED_AS.items()
                     for name in _source_files(source / folder) if f"{installed}/{name}" not in shipped)
    assert not missing, f"left out of the wheel: {missing}"
    assert not [name for name in shipped if name.startswith(("tests/", "benchmarks/", ".ci/"))]


def test_the_sdist_holds_the_tests_docs_and_deployment_files(built: tuple[Path, Path, Path]) -> None:
    source, _, sdist = built
    with tarfile.open(sdist) as archive:
        shipped = {name.partition("/")[2] for name in archive.getnames()}
    wanted = {f"{folder}/{name}" for folder in (*SDIST_FOLDERS, *INSTALLED_AS)
              for name in _source_files(source / folder)}
    assert not sorted(wanted - shipped), f"left out of the sdist: {sorted(wanted - shipped)}"


def test_the_main_job_runs_from_the_installed_wheel(built: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The README's main job, from the wheel's files alone, in a folder that is not the checkout."""
    _, wheel, _ = built
    target, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(target)  # what pip puts in site-packages (the .dist-info aside)
    code = ("import sys, connector_ops; assert connector_ops.__file__.startswith(sys.argv[1]), connector_ops.__file__;"
            " from connector_ops.cli import entry_point; sys.argv = ['connector-ops', 'pipeline', 'run',"
            " 'sales_report']; entry_point()")
    env = {**os.environ, "PYTHONPATH": str(target), "CONNECTOR_OPS_HOME": str(tmp_path / "home")}
    env.pop("DAGSTER_HOME", None)
    run = subprocess.run([sys.executable, "-c", code, str(target)], cwd=elsewhere, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "succeeded" in (run.stdout + run.stderr).lower()
