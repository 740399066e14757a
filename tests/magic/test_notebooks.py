"""Every notebook in notebooks/ runs top to bottom on a real kernel (nbclient), on the embedded defaults.

Each notebook runs in a copy of notebooks/ inside a temporary folder that also links the repository's
``pipelines`` package (notebooks refer to ``../pipelines/data``), with ``CONNECTOR_OPS_HOME`` pointing to a
temporary home and no other connector variable set. Cells tagged ``raises-exception`` must fail with the
magics' one-line error; every other cell must succeed; and each notebook's outputs are checked.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

#: strings each notebook's outputs must contain (besides running without unexpected errors)
EXPECTED = {
    "etl_tour.ipynb": [
        "virtualFileId", "<table", "paid orders in the North; first: SO-1002", "hasNext",
        "rejectionFileId", "deletedCount", "tidy_sales.csv", "first rows of the file", "NORTH", "cleaned",
    ],
    "drive_and_mail.ipynb": [
        "folderId", "sales.csv", "sales-2026.csv", "sharedLink", "first rows of the file",
        "Your sales file, Ada → [{'Email': 'ada@example.com', 'Name': 'Ada'}] | attachments: ['sales.csv']",
    ],
    "pipeline_debugging.ipynb": [
        "pipeline retail_customers succeeded", "pipeline debug_me FAILED", "pipeline debug_me succeeded",
        "same result, step by step",
    ],
}
#: the one-line error each ``raises-exception`` cell must print
ERRORS = {
    "etl_tour.ipynb": ["etl.iterate failed (404): not found"],
    "drive_and_mail.ipynb": ["mail.send_transactional_message failed (400): recipients[0].to"],
    "pipeline_debugging.ipynb": ["pipeline debug_me failed (404): step count: etl.iterate failed (404): not found"],
}


def _text(output: nbformat.NotebookNode) -> str:
    if output.output_type == "stream":
        return output.text
    if output.output_type == "error":
        return "\n".join(output.traceback)
    data = output.get("data", {})
    return "\n".join(str(data.get(kind, "")) for kind in ("text/plain", "text/html"))


def test_every_notebook_is_covered() -> None:
    assert len(NOTEBOOKS) >= 3
    assert {p.name for p in NOTEBOOKS} == set(EXPECTED)


def test_notebooks_are_committed_without_outputs() -> None:
    for path in NOTEBOOKS:
        book = nbformat.read(path, as_version=4)
        for cell in book.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: clear the outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    workdir = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", workdir)
    (tmp_path / "pipelines").symlink_to(ROOT / "pipelines")

    book = nbformat.read(path, as_version=4)
    NotebookClient(book, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()

    errors, texts = [], []
    for cell in book.cells:
        if cell.cell_type != "code":
            continue
        cell_errors = [o for o in cell.outputs if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", []):
            assert len(cell_errors) == 1, f"{path.name}: {cell.source!r} was expected to fail"
            [error] = cell_errors
            assert len(error.traceback) == 1 and "Traceback" not in error.traceback[0]  # one line, no wall
            errors.append(error.traceback[0])
        else:
            assert not cell_errors, f"{path.name}: {cell.source!r} failed"
        texts += [_text(o) for o in cell.outputs if o.output_type != "error"]
    assert [e.split(":")[0] for e in errors] == [e.split(":")[0] for e in ERRORS[path.name]]
    for error, expected in zip(errors, ERRORS[path.name], strict=True):
        assert error.startswith(expected), error
    joined = "\n".join(texts)
    for expected in EXPECTED[path.name]:
        assert expected in joined, f"{path.name}: {expected!r} not in the outputs"
    assert "IProgress not found" not in joined
