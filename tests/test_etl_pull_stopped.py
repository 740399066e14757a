"""An export stopped half way (a Ctrl-C; here the test's own signal, whose exception is neither
``KeyboardInterrupt`` nor an ``Exception``, like Dagster's) once it has written part of its file: no platform
file and no temporary file are kept, and its read snapshot ends even while the traceback lives on (a notebook
keeps the last one), so the virtual file can be dropped and pulled again. The signal is sent as the export
reports its first progress (through the reporter an entry point installs, :func:`reporting_to`), so its
exception is raised in the export's own code while the scan it reads waits, suspended, with most of the
rows still to come."""

from __future__ import annotations

import pyarrow as pa
import pytest

from connector_ops import invoke
from connector_ops.etl import pull_parquet
from connector_ops.frames import push_frame
from connector_ops.kernel.progress import reporting_to
from tests.signals import Stop, signal_at
from tests.store_activity import open_snapshots


@pytest.mark.parametrize("export_type", ["csv", "json", "parquet"])
def test_an_export_stopped_half_way_keeps_nothing_and_ends_its_snapshot(files, env, monkeypatch, signalled_after,
                                                                       export_type):
    monkeypatch.setattr(pull_parquet, "GROUP_ROWS", 1000)  # Parquet writes as it goes, not at 131,072 rows
    rows = 200_000
    vf = push_frame(pa.table({"a": ["x" * 100] * rows, "b": [str(i) for i in range(rows)]}))
    folder = files.root  # the folder, made as the store starts
    before = sorted(folder.iterdir())
    with pytest.raises(Stop) as stopped, reporting_to(signal_at(1)):
        invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
    assert stopped.traceback
    assert sorted(folder.iterdir()) == before
    assert open_snapshots(env["CONNECTOR_OPS_DATABASE_URL"], vf) == 0
    again = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": "out"})
    assert again["platformFile"]["size"] > 1_000_000
    invoke("etl.clean", {"virtualFileId": vf})
