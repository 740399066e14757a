"""The shipped notebooks in a real Jupyter front end: JupyterLab on 127.0.0.1, headless Chromium, Selenium.

What a person sees is checked in the rendered page, not in the notebook file: query results display as
tables, a long Push shows a progress bar that is gone when the cell finishes, and a failed action is one
line. Screenshots of each check are kept in the test's output folder (``tmp_path``; the paths are printed).

The browser is Debian's ``chromium`` with its ``chromedriver`` (the suite installs both with apt-get if missing);
Selenium is pointed at that driver, so Selenium Manager never downloads anything, and Chromium resolves no
host but 127.0.0.1. JupyterLab runs with update checks, news and the extension manager off. A browser that
cannot be installed fails the test under ``CI=true`` and skips it elsewhere.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nbformat
import pytest

from tests.servers import free_port
from tests.system_packages import require_programs

ROOT = Path(__file__).resolve().parents[2]
LONG_PUSH_ROWS = 250_000
#: JupyterLab settings for a test: every cell kept in the page, no notification asking about news
SETTINGS = {
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
}


def _require_browser() -> tuple[str, str]:
    """Debian's chromium and its chromedriver, installed by the suite when missing (tests/system_packages.py)."""
    found = require_programs({"chromium": "chromium|chromium-browser", "chromedriver": "chromedriver"},
                             ("chromium", "chromium-driver"))
    return found["chromium"], found["chromedriver"]


def _long_push_notebook(path: Path) -> None:
    cells = [
        "%load_ext connector_ops",
        "import csv\n"
        "with open('big.csv', 'w', newline='', encoding='utf-8') as f:\n"
        "    w = csv.writer(f, delimiter='§')\n"
        "    w.writerow(['order_id', 'region', 'product', 'quantity', 'price'])\n"
        f"    w.writerows((f'SO-{{i}}', ('North', 'South', 'East', 'West')[i % 4], f'Widget {{i % 97}}', i % 50,"
        f" i / 7) for i in range({LONG_PUSH_ROWS}))",
        "%connectors add-file big.csv -o big",
        # a Push long enough for the bar's 0.5 s delay: the columnar path loads 250k rows in less, so the
        # delimiter is one of two bytes in UTF-8, which only the row-by-row reader reads (same progress
        # reporting). Another encoding did this until the columnar path read other encodings too.
        '%etl push -o big_vf {"platformFile": {{big}}, "parameters": {"csvDelimiter": "§"}}',
        "print('pushed', big_vf['virtualFileId'])",
    ]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    book.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(book, path)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """JupyterLab serving copies of the shipped notebooks (and a long-push one) from a temporary folder."""
    base = tmp_path_factory.mktemp("lab")
    root = base / "notebooks"
    root.mkdir()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(notebook, root / notebook.name)
    _long_push_notebook(root / "long_push.ipynb")
    settings = base / "settings"
    settings.mkdir()
    (settings / "overrides.json").write_text(json.dumps(SETTINGS))
    port, token = free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CONNECTOR_OPS_", "GOOGLE_", "MAILJET_", "SMTP_", "DAGSTER_HOME"))}
    env.update(CONNECTOR_OPS_HOME=str(base / "home"), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"), IPYTHONDIR=str(base / "ipython"))
    log = (base / "jupyter.log").open("w")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "jupyter"), "lab", "--no-browser", "--allow-root",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.app_settings_dir={settings}", f"--LabApp.workspaces_dir={base / 'workspaces'}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/api/status", params={"token": token}, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not start: {(base / 'jupyter.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield {"url": url, "token": token, "root": root}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    chromium, chromedriver = _require_browser()
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager, were it ever asked, must not download
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1000", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-pings",
                 "--disable-domain-reliability", "--disable-client-side-phishing-detection",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    try:
        # Chromium's own scratch files (its singleton socket's directory, which a killed browser leaves
        # behind) go to the test's temporary directory, not to /tmp
        scratch = {**os.environ, "TMPDIR": str(tmp_path_factory.mktemp("chromium"))}
        driver = webdriver.Chrome(service=Service(executable_path=chromedriver, env=scratch), options=options)
    except Exception as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"Chromium did not start under CI=true: {exc}")
        pytest.skip(f"Chromium did not start: {exc}")
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _open(browser: Any, lab: dict[str, Any], name: str) -> None:
    browser.get(f"{lab['url']}/lab/tree/{name}?token={lab['token']}&reset")
    _wait(browser, "jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'", 120)


def _wait(browser: Any, condition: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = browser.execute_script(f"try {{ return {condition}; }} catch (e) {{ return null; }}")
        if value:
            return value
        if time.monotonic() > deadline:
            shot = Path(os.environ.get("TMPDIR", "/tmp")) / f"lab-timeout-{os.getpid()}.png"
            browser.save_screenshot(str(shot))
            raise AssertionError(f"timed out after {timeout}s waiting for: {condition} (page: {shot})")
        time.sleep(0.2)


RUN_STATE = """
const nb = jupyterapp.shell.currentWidget;
const cells = Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell'));
const prompts = cells.map(c => (c.querySelector('.jp-InputPrompt') || {}).textContent || '');
return {busy: prompts.some(p => p.includes('*')), done: prompts.filter(p => /\\[\\d+\\]/.test(p)).length,
        total: cells.length, kernel: nb.sessionContext.session.kernel.status};
"""


def _run_all(browser: Any, timeout: float = 240) -> None:
    browser.execute_script("jupyterapp.commands.execute('notebook:run-all-cells')")
    _wait_finished(browser, timeout)


def _wait_finished(browser: Any, timeout: float) -> None:
    time.sleep(0.5)  # let "run all" mark the cells as queued
    deadline = time.monotonic() + timeout
    while True:
        state = browser.execute_script(RUN_STATE)
        if state["done"] == state["total"] and not state["busy"] and state["kernel"] == "idle":
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the notebook did not finish: {state}")
        time.sleep(0.3)


def _outputs(browser: Any) -> list[dict[str, Any]]:
    """Per code cell: its source, rendered output text and the number of tables in its outputs."""
    return browser.execute_script("""
        return Array.from(document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')).map(c => ({
            source: c.querySelector('.jp-InputArea-editor').textContent,
            errors: Array.from(c.querySelectorAll(
                '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')).map(e => e.innerText),
            text: Array.from(c.querySelectorAll('.jp-OutputArea-output')).map(e => e.innerText).join('\\n'),
            tables: c.querySelectorAll('.jp-OutputArea-output table').length,
        }));
    """)


def _shot(browser: Any, element_script: str, path: Path) -> Path:
    element = browser.execute_script(f"const e = {element_script}; e.scrollIntoView({{block: 'center'}}); return e;")
    time.sleep(0.2)
    element.screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def test_tables_display_and_errors_are_one_line(browser: Any, lab: dict[str, Any], tmp_path: Path) -> None:
    _open(browser, lab, "etl_tour.ipynb")
    _run_all(browser)
    cells = _outputs(browser)
    query = next(i for i, c in enumerate(cells) if c["source"].startswith("%etl query -o north"))
    assert cells[query]["tables"] == 1
    rendered = cells[query]["text"]
    assert "order_id" in rendered and "SO-1002" in rendered and "more rows not shown" in rendered
    assert sum(c["tables"] for c in cells) >= 6  # query, iterate, validate, pull preview, pandas, per region
    _shot(browser, f"document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')[{query}]"
                   ".querySelector('.jp-OutputArea-output table')", tmp_path / "table.png")

    failed = [(i, c) for i, c in enumerate(cells) if c["errors"]]
    assert [c["source"].split(" {")[0] for _, c in failed] == ["%etl iterate"]
    [(index, cell)] = failed
    [error] = cell["errors"]
    assert error.strip() == "etl.iterate failed (404): not found"  # one line: no traceback, no wall of text
    _shot(browser, f"document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')[{index}]",
          tmp_path / "error.png")
    assert all("Warning" not in c["text"] for c in cells)
    # the later cells ran: a failed action stops "Run all" only where the cell is not tagged raises-exception
    assert "cleaned" in cells[-1]["text"]


PROGRESS = """
const cells = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell');
const cell = cells[arguments[0]];
const bars = Array.from(cell.querySelectorAll('.widget-progress, progress, .progress-bar'))
    .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height > 0);
return bars.length ? {count: bars.length, text: cell.querySelector('.jp-OutputArea').innerText} : null;
"""


def test_a_long_push_shows_a_progress_bar_that_goes_away(browser: Any, lab: dict[str, Any], tmp_path: Path) -> None:
    _open(browser, lab, "long_push.ipynb")
    push = 3
    browser.execute_script("jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + 180
    while (seen := browser.execute_script(PROGRESS, push)) is None:
        assert time.monotonic() < deadline, "no progress bar appeared during the push"
        time.sleep(0.1)
    assert "push big.csv" in seen["text"].replace("\u2007", " ")  # tqdm pads with figure spaces
    _shot(browser, f"document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')[{push}]",
          tmp_path / "progress.png")
    _wait_finished(browser, 240)
    cells = _outputs(browser)
    assert cells[-1]["text"].startswith("pushed "), cells[-1]
    assert browser.execute_script(PROGRESS, push) is None  # the bar is gone once the cell finished
    assert "big.csv:" not in cells[push]["text"].replace("\u2007", " ")
    _shot(browser, f"document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')[{push}]",
          tmp_path / "progress-done.png")
