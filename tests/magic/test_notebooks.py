"""Every notebook in notebooks/ runs top to bottom on a real kernel (nbclient), on the embedded defaults.

Each notebook runs with an empty temporary folder as its working directory (a notebook must run from
any folder: it finds the samples through the installed package, never through relative paths), with
``CONNECTOR_OPS_HOME`` pointing to a temporary home and no other connector variable set. Cells tagged
``raises-exception`` must fail with the magics' one-line error; every other cell must succeed; and each
notebook's outputs are checked (no warnings among them).
"""

from __future__ import annotations

import os
import subprocess
import sys
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
        "NORTH     602",  # the quantities summed as numbers (text glued together before: "8312179…")
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


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No connector variable but a temporary ``CONNECTOR_OPS_HOME``; returns an empty working folder."""
    for name in list(os.environ):
        if name.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_", "DAGSTER_HOME")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "home"))
    workdir = tmp_path / "anywhere"
    workdir.mkdir()
    return workdir


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path: Path, clean_env: Path) -> None:
    workdir = clean_env
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
    assert "Warning" not in joined, joined[joined.find("Warning") - 300:][:600]  # e.g. Dagster's shutdown_asyncgens


def test_nbconvert_execute_works_with_the_dev_install(clean_env: Path) -> None:
    """``jupyter nbconvert --execute`` is what users type; the dev extra brings it, and the notebook's
    outputs carry no warning (Dagster's ``shutdown_asyncgens`` one was printed by every ``%pipeline run``)."""
    jupyter = Path(sys.executable).parent / "jupyter"
    notebook = ROOT / "notebooks" / "pipeline_debugging.ipynb"
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute",
                           "--output-dir", str(clean_env), str(notebook)],
                          cwd=clean_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    book = nbformat.read(clean_env / notebook.name, as_version=4)
    texts = [_text(o) for cell in book.cells if cell.cell_type == "code" for o in cell.outputs]
    assert any("pipeline debug_me succeeded" in t for t in texts)
    assert not [t for t in texts if "RuntimeWarning" in t or "shutdown_asyncgens" in t]


def test_a_notebook_run_by_nbconvert_keeps_no_progress_bar(clean_env: Path) -> None:
    """The bars "disappear when done" in JupyterLab, but ``jupyter nbconvert --execute`` saved each as it was
    first drawn (``push big.csv: 10%|# | 8.39M/83.2M``) with its widgets' states. A bar is now an output
    emptied when it closes: the saved notebook holds none of it, and no widget state."""
    import json

    jupyter = Path(sys.executable).parent / "jupyter"
    data = clean_env / "big.csv"
    data.write_bytes(b"id,name,note\n" + b"".join(b"%d,name %d,%s\n" % (i, i, b"x" * 60) for i in range(400_000)))
    added = subprocess.run([str(Path(sys.executable).parent / "connector-ops"), "files", "add", str(data)],
                           cwd=clean_env, capture_output=True, text=True, timeout=120, check=True)
    book = nbformat.v4.new_notebook()
    book.cells = [
        nbformat.v4.new_code_cell("%load_ext connector_ops"),
        nbformat.v4.new_code_cell(
            "import time\n"
            "from connector_ops.kernel.progress import reporting_to, tqdm_reporter, track\n"
            "with reporting_to(tqdm_reporter), track('work.csv', 20, 'B') as bar:\n"
            "    for _ in range(20):\n"
            "        time.sleep(0.1)\n"
            "        bar.update(1)\n"
            "print('worked')"),
        nbformat.v4.new_code_cell(f"%etl push -o r {json.dumps({'platformFile': json.loads(added.stdout)})}"),
    ]
    nbformat.write(book, clean_env / "bars.ipynb")
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--output", "bars_out.ipynb",
                           "bars.ipynb"], cwd=clean_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = nbformat.read(clean_env / "bars_out.ipynb", as_version=4)
    outputs = [o for cell in saved.cells for o in cell.get("outputs", [])]
    assert not saved.metadata.get("widgets"), saved.metadata.get("widgets")
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    texts = [_text(o) for o in outputs]
    assert not [t for t in texts if "work.csv" in t or "big.csv:" in t], texts
    assert any("worked" in t for t in texts) and any("virtualFileId" in t for t in texts)
    # the bar of the second cell was drawn (2 s of work, shown after 0.5 s), then emptied in place
    assert {"text/html": "", "text/plain": ""} in [dict(o.get("data", {})) for o in saved.cells[1].outputs]
