"""Header injection and crash leftovers (issue 14)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.kernel.atomic import SWEPT_STAMP, TEMP_PREFIX, sweep_leftovers
from connector_ops.resources.file_server import create_app
from connector_ops.resources.platform_files import PlatformFileStore
from tests.servers import serving

EVIL = "text/plain\r\nX-Injected: 1"


@pytest.mark.parametrize("content_type", [EVIL, "text/plain\nX: y", "text/plain\x00", "text/\x7fplain"])
def test_upload_refuses_a_content_type_with_control_characters(env, files, content_type):
    pf = files.add_bytes(b"hello", "a.txt").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("drive.upload_file", {"platformFile": {**pf, "contentType": content_type}})
    assert info.value.status == 400
    message = info.value.body["message"]
    assert message.startswith("platformFile.contentType: "), message
    assert "control characters" in message or "NUL" in message


def test_push_refuses_a_content_type_with_control_characters(env, files):
    pf = files.add_bytes(b"a\n1\n", "a.csv").to_json()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.push", {"platformFile": {**pf, "contentType": EVIL}})
    assert info.value.status == 400 and info.value.body["message"].startswith("platformFile.contentType")


def test_the_store_refuses_to_record_such_a_content_type(tmp_path):
    store = PlatformFileStore(files_dir=str(tmp_path / "files"))
    with pytest.raises(Exception) as info:
        store.add_bytes(b"x", "a.txt", EVIL)
    assert "contentType" in str(info.value)
    assert not (tmp_path / "files").exists() or list((tmp_path / "files").iterdir()) == []


def test_file_server_answers_for_a_stored_content_type_with_crlf(tmp_path):
    """A descriptor written before the check (or by hand) still gets a response, with a safe type."""
    store = PlatformFileStore(files_dir=str(tmp_path / "files"))
    pf = store.add_bytes(b"payload", "a.txt", "text/plain")
    meta = tmp_path / "files" / f"{pf.id}.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "contentType": EVIL}))
    with serving(create_app(store)) as base:
        response = httpx.get(f"{base}/files/{pf.id}")
    assert response.status_code == 200 and response.content == b"payload"
    assert response.headers["content-type"] == "application/octet-stream"
    assert "x-injected" not in response.headers


# -- temporary files of writers killed mid-write ---------------------------------------------------------
WRITER = textwrap.dedent("""
    import os, signal, sys
    from connector_ops.resources.platform_files import PlatformFileStore
    store = PlatformFileStore(files_dir=sys.argv[1])
    with store.create("big.csv") as sink:
        sink.write(b"x" * 100_000)
        sink.flush()
        print("writing", flush=True)
        if sys.argv[2] == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.stdin.readline()  # a live writer: waits until told to finish
        sink.write(b"y")
    print(sink.descriptor.id, flush=True)
""")


def start_writer(folder: Path, mode: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    return child


def temp_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith(TEMP_PREFIX))


def age(paths: list[Path], seconds: float = 3600) -> None:
    """Leftovers are judged only once older than the sweep's grace period: make these old."""
    old = time.time() - seconds
    for path in paths:
        os.utime(path, (old, old))


def test_leftovers_of_killed_writers_are_removed_when_the_store_starts_and_live_ones_kept(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    dead = start_writer(folder, "die")
    assert dead.wait(timeout=60) == -signal.SIGKILL
    dead_files = temp_files(folder)
    assert len(dead_files) == 1  # what kill -9 leaves
    live = start_writer(folder, "live")
    try:
        live_files = [p for p in temp_files(folder) if p not in dead_files]
        assert len(live_files) == 1
        age([*dead_files, *live_files, folder / SWEPT_STAMP])  # the writers' starts swept an hour ago

        store = PlatformFileStore(files_dir=str(folder))  # a new process's store starts
        assert store.root == folder
        assert temp_files(folder) == live_files  # the dead writer's leftover is gone, the live one's kept

        assert live.stdin is not None
        live.stdin.write("go\n")
        live.stdin.flush()
        file_id = live.stdout.readline().strip() if live.stdout else ""
        assert live.wait(timeout=60) == 0
    finally:
        live.kill()
    assert store.read_bytes(store.describe(file_id)) == b"x" * 100_000 + b"y"
    assert temp_files(folder) == []


def test_young_leftovers_wait_for_the_grace_period(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    dead = start_writer(folder, "die")
    dead.wait(timeout=60)
    assert sweep_leftovers(folder) == []  # just written: its writer might not hold the lock yet
    assert len(temp_files(folder)) == 1
    assert len(sweep_leftovers(folder, min_age_s=0)) == 1
    assert temp_files(folder) == []


def test_pull_killed_mid_write_leaves_nothing_after_restart(env, files, store, tmp_path):
    """kill -9 during a real Pull; the next store start cleans what it left."""
    vf = store.create_from_rows([{"a": "x" * 200, "b": str(i)} for i in range(50_000)])
    assert files.root.is_dir()
    code = textwrap.dedent(f"""
        import os, signal, threading, time
        from connector_ops import invoke
        folder = {str(files.files_dir)!r}
        def killer():
            while not any(n.startswith(".tmp-") and os.path.getsize(os.path.join(folder, n)) > 0
                          for n in os.listdir(folder)):
                time.sleep(0.001)
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Thread(target=killer, daemon=True).start()
        invoke("etl.pull", {{"virtualFileId": {vf!r}, "exportType": "csv", "exportName": "out.csv"}})
        time.sleep(60)
    """)
    child = subprocess.run([sys.executable, "-c", code], env=os.environ.copy(), timeout=120)
    assert child.returncode == -signal.SIGKILL
    folder = Path(files.files_dir)
    leftovers = temp_files(folder)
    assert leftovers, "the kill should have happened mid-write"
    age([*leftovers, folder / SWEPT_STAMP])  # the last sweep, by this test's store, an hour ago
    PlatformFileStore(files_dir=str(folder)).root  # noqa: B018 - a store starting
    assert temp_files(folder) == []
    assert not any(p.suffix == ".json" for p in folder.iterdir())  # no descriptor of a half file


def test_data_whose_descriptor_a_killed_writer_never_wrote_is_removed_when_old(tmp_path):
    """``create`` puts the data in place, then writes its descriptor: a kill between the two left data no
    inventory or ``gc`` sees. A store starting removes it once older than the grace period; a young one
    (its writer may be between the two) and every described file stay."""
    folder = tmp_path / "files"
    kept = PlatformFileStore(files_dir=str(folder)).add_bytes(b"kept", "kept.csv")
    orphan, young = folder / ("a" * 32), folder / ("b" * 32)
    orphan.write_bytes(b"lost")
    young.write_bytes(b"being described")
    age([orphan, folder / kept.id, folder / f"{kept.id}.json", folder / SWEPT_STAMP])
    store = PlatformFileStore(files_dir=str(folder))
    assert store.root == folder
    assert not orphan.exists() and young.exists()
    assert store.read_bytes(store.describe(kept.id)) == b"kept"


def test_a_folder_is_swept_once_an_hour_and_always_by_sweep(tmp_path):
    """Every process's first use of the store read the whole folder (one ``stat`` per file: 0.9 s at
    40,000 files) to find leftovers a killed writer may have left: each CLI Push, each Dagster step. A start
    now sweeps only when no start did in the last hour (the folder's ``.swept`` stamp); ``sweep`` (``gc``,
    ``files serve``) always does."""
    folder = tmp_path / "files"
    first = PlatformFileStore(files_dir=str(folder))
    kept = first.add_bytes(b"kept", "kept.csv")  # the first start sweeps and dates the stamp
    assert (folder / SWEPT_STAMP).is_file()
    orphan, leftover = folder / ("a" * 32), folder / f"{TEMP_PREFIX}999999-killed"
    orphan.write_bytes(b"lost")
    leftover.write_bytes(b"half")
    age([orphan, leftover])
    assert PlatformFileStore(files_dir=str(folder)).root == folder  # a start within the hour
    assert orphan.exists() and leftover.exists()
    age([folder / SWEPT_STAMP], 3601)
    store = PlatformFileStore(files_dir=str(folder))
    assert store.root == folder  # the first start of the next hour
    assert not orphan.exists() and not leftover.exists()
    assert time.time() - (folder / SWEPT_STAMP).stat().st_mtime < 60  # dated again
    orphan.write_bytes(b"lost again")
    age([orphan])
    PlatformFileStore(files_dir=str(folder)).sweep()
    assert not orphan.exists()
    assert store.read_bytes(store.describe(kept.id)) == b"kept" and store.inventory()[0][0] == kept.id
    empty = PlatformFileStore(files_dir=str(tmp_path / "never"))
    empty.sweep()  # nothing stored yet: nothing made
    assert not (tmp_path / "never").exists()


def test_a_stamp_or_leftovers_dated_in_the_future_do_not_stop_the_sweep(tmp_path):
    """After a sweep the clock stepped back (an NTP correction, a VM restored) or the folder came from a
    host ahead: a ``.swept`` dated 30 days ahead stopped every start from sweeping until the clock caught up,
    and a leftover dated ahead stayed "young" as long. A stamp more than a minute ahead is stale; a file
    dated more than the grace period ahead is old — a live writer's is still kept (its lock), and so is a
    file dated just ahead (hosts disagree by seconds)."""
    folder = tmp_path / "files"
    kept = PlatformFileStore(files_dir=str(folder)).add_bytes(b"kept", "kept.csv")
    dead = start_writer(folder, "die")
    assert dead.wait(timeout=60) == -signal.SIGKILL
    [dead_file] = temp_files(folder)
    live = start_writer(folder, "live")
    try:
        [live_file] = [p for p in temp_files(folder) if p != dead_file]
        orphan, just_ahead = folder / ("a" * 32), folder / ("b" * 32)
        orphan.write_bytes(b"lost")
        just_ahead.write_bytes(b"being described, by a host a few seconds ahead")
        age([dead_file, live_file, orphan, folder / kept.id, folder / f"{kept.id}.json"], -30 * 86400)
        age([just_ahead], -20)
        age([folder / SWEPT_STAMP], -30 * 86400)  # swept "in 30 days"
        store = PlatformFileStore(files_dir=str(folder))  # a new process's store starts
        assert store.root == folder
        assert temp_files(folder) == [live_file]
        assert not orphan.exists() and just_ahead.exists()
        assert abs(time.time() - (folder / SWEPT_STAMP).stat().st_mtime) < 60  # dated again, now
        assert store.read_bytes(store.describe(kept.id)) == b"kept"
    finally:
        live.kill()
        live.wait(timeout=60)
    age([folder / SWEPT_STAMP], -30)  # a host a little ahead swept: the stamp counts
    orphan.write_bytes(b"lost again")
    age([orphan], 3600)
    PlatformFileStore(files_dir=str(folder)).root  # noqa: B018 - a start within the hour
    assert orphan.exists()


def test_a_push_killed_while_it_reads_a_copy_leaves_no_copy(env, files, tmp_path):
    """A Parquet file or a zip archive that cannot seek (compressed, over HTTP, kept in the database) is read
    from a copy. Named in the temporary folder, that copy stayed for ever after a kill -9, as large as the
    file; without a name, the kernel removes it with the process."""
    import gzip
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(pa.table({"a": [str(i) for i in range(20_000)]}), sink)
    pf = files.add_bytes(gzip.compress(sink.getvalue()), "rows.parquet.gz")
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = textwrap.dedent(f"""
        import contextlib, os, signal
        import connector_ops.etl.push_parquet as push_parquet
        from connector_ops import invoke
        copying = push_parquet.seekable_opener
        @contextlib.contextmanager
        def killed_once_copied(*args, **kwargs):  # the real opener; the process dies while its copy is read
            with copying(*args, **kwargs) as opener:
                os.kill(os.getpid(), signal.SIGKILL)
                yield opener
        push_parquet.seekable_opener = killed_once_copied
        invoke("etl.push", {{"platformFile": {pf.to_json()!r}}})
    """)
    child = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TMPDIR": str(temp)}, timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert list(temp.iterdir()) == []
