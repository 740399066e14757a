"""An export stopped half way (a Ctrl-C, here the test's own signal) once it has written part of its file: no
platform file and no temporary file are kept, and its read snapshot ends even while the traceback lives on (a
notebook keeps the last one), so the virtual file can be dropped and pulled again."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from connector_ops import invoke
from connector_ops.etl import pull_parquet
from connector_ops.frames import push_frame
from tests.signals import Stop
from tests.store_activity import open_snapshots


@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_an_export_stopped_half_way_keeps_nothing_and_ends_its_snapshot(files, env, monkeypatch, signalled_after,
                                                                       export_type):
    monkeypatch.setattr(pull_parquet, "GROUP_ROWS", 1000)  # Parquet writes as it goes, not at 131,072 rows
    rows = 600_000  # seconds of export on either database, so the signal lands in it
    vf = push_frame(pa.table({"a": ["x" * 100] * rows, "b": [str(i) for i in range(rows)]}))
    folder = files.root  # the folder, made as the store starts
    before = sorted(folder.iterdir())
    done = threading.Event()  # a watcher left looking after a failure would signal a later test
    watcher = threading.Thread(target=_signal_once_written, args=(folder, done))
    watcher.start()
    try:
        with pytest.raises(Stop) as stopped:
            invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
    finally:
        done.set()
        watcher.join()
    assert stopped.traceback
    assert sorted(folder.iterdir()) == before
    assert open_snapshots(env["CONNECTOR_OPS_DATABASE_URL"], vf) == 0
    again = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
    assert again["platformFile"]["size"] > 1_000_000
    invoke("etl.clean", {"virtualFileId": vf})


def _signal_once_written(folder: Path, done: threading.Event) -> None:
    """The test's signal (its handler is ``signalled_after``'s) as soon as a temporary file in ``folder`` holds
    bytes, the export under way; nothing once ``done`` is set."""
    while not done.wait(0.001):
        if any(entry.name.startswith(".tmp-") and _size(entry) > 0 for entry in os.scandir(folder)):
            os.kill(os.getpid(), signal.SIGUSR1)
            return


def _size(entry: os.DirEntry) -> int:
    """A directory entry's size, 0 once it is gone (a temporary file renamed or removed meanwhile)."""
    try:
        return entry.stat().st_size
    except FileNotFoundError:
        return 0
