"""A pipeline's ``${file:…}`` files are hashed once per content, not at every load (``digest_cache``).

"Not read again" is observed from the kernel's count of the bytes a process read (``rchar`` of
``/proc/<pid>/io``): the referenced file is larger than everything else a load reads, so a load that reads
it shows it. Timing is not used. Files are real, and so is the cache file in ``CONNECTOR_OPS_HOME``.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connector_ops.pipelines.dsl import load_pipeline
from connector_ops.pipelines.dsl.digest_cache import CACHE_NAME, MAX_ENTRIES, RACY_NS, DigestCache

#: larger than what loading a pipeline reads besides it (the YAML, the cache file, a lazy import)
BIG = 32 << 20
STEP = 'steps:\n  - {id: load, action: etl.push, input: {platformFile: "${file:%s}"}}\n'


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(home))
    return home


def pipeline_of(folder: Path, data: str, name: str = "cached") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\n" + STEP % data)
    return path


def settle() -> None:
    """Wait until the files just written are older than the racy window: only then is a digest kept (the
    ctime cannot be set back, so there is no shortcut)."""
    time.sleep(RACY_NS / 1e9 + 0.2)


def cached(home: Path) -> dict[str, dict]:
    return json.loads((home / CACHE_NAME).read_text())["entries"]


def bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_second_load_in_another_process_does_not_read_the_file_again(home: Path, tmp_path: Path) -> None:
    """The code server loads the pipeline; a run worker (another process, same home) loads it again and
    takes the digest from the cache without reading the 32 MB file — and gets the same version."""
    data = tmp_path / "lookup.bin"
    data.write_bytes(os.urandom(BIG))
    path = pipeline_of(tmp_path, "lookup.bin")
    settle()
    before = bytes_read()
    first = load_pipeline(path)
    assert bytes_read() - before >= BIG  # the observable sees a read of the file
    assert first.files == {"lookup.bin": hashlib.sha256(data.read_bytes()).hexdigest()}
    assert cached(home)[str(data)]["sha256"] == first.files["lookup.bin"]
    script = ("import json, sys\n"
              "from pathlib import Path\n"
              "from connector_ops.pipelines.dsl import load_pipeline\n"
              "def rchar(): return int(Path('/proc/self/io').read_text().split('rchar:')[1].split()[0])\n"
              "before = rchar()\n"
              "pipeline = load_pipeline(sys.argv[1])\n"
              "print(json.dumps({'read': rchar() - before, 'digest': pipeline.digest}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    second = json.loads(done.stdout.splitlines()[-1])
    assert second["digest"] == first.digest
    assert second["read"] < BIG // 2, second


def test_an_edit_keeping_the_size_and_restoring_the_mtime_is_a_new_version(home: Path, tmp_path: Path) -> None:
    """Same size, mtime set back with os.utime: the ctime still moves, and the file is hashed again."""
    data = tmp_path / "people.csv"
    data.write_bytes(b"id,name\n1,a\n")
    path = pipeline_of(tmp_path, "people.csv")
    settle()
    first = load_pipeline(path)
    assert str(data) in cached(home)  # the cache holds it: the edit below is what must get past it
    st = data.stat()
    data.write_bytes(b"id,name\n1,b\n")
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (data.stat().st_size, data.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    edited = load_pipeline(path)
    assert edited.files["people.csv"] == hashlib.sha256(b"id,name\n1,b\n").hexdigest()
    assert edited.digest != first.digest


def test_a_file_hashed_within_the_racy_window_is_hashed_again(home: Path, tmp_path: Path) -> None:
    """A file written moments before it is hashed could be written again without its timestamps moving (a
    coarse clock tick): its digest is not kept, so the next load hashes it — and sees the edit."""
    data = tmp_path / "people.csv"
    data.write_bytes(b"id,name\n1,a\n")
    path = pipeline_of(tmp_path, "people.csv")
    first = load_pipeline(path)
    assert str(data) not in cached_or_empty(home)
    st = data.stat()
    data.write_bytes(b"id,name\n1,b\n")
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    edited = load_pipeline(path)
    assert edited.files["people.csv"] == hashlib.sha256(b"id,name\n1,b\n").hexdigest() != first.files["people.csv"]
    assert str(data) not in cached_or_empty(home)
    settle()
    assert load_pipeline(path).digest == edited.digest
    assert cached(home)[str(data)]["sha256"] == edited.files["people.csv"]  # settled now: kept


def cached_or_empty(home: Path) -> dict[str, dict]:
    return cached(home) if (home / CACHE_NAME).exists() else {}


def test_a_file_replaced_by_a_rename_is_a_new_version(home: Path, tmp_path: Path) -> None:
    """An editor's save (write a new file, rename it over the old) with the same size and the old mtime: a
    new inode, hashed again."""
    data = tmp_path / "people.csv"
    data.write_bytes(b"id,name\n1,a\n")
    path = pipeline_of(tmp_path, "people.csv")
    settle()
    first = load_pipeline(path)
    assert str(data) in cached(home)
    st = data.stat()
    new = tmp_path / "people.csv.new"
    new.write_bytes(b"id,name\n1,b\n")
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    new.replace(data)
    edited = load_pipeline(path)
    assert edited.files["people.csv"] == hashlib.sha256(b"id,name\n1,b\n").hexdigest()
    assert edited.digest != first.digest


@pytest.mark.parametrize("garbage", [b"\x00\xffnot json", b"[1, 2]", b'{"format": 1, "entries": []}',
                                     b'{"format": 1, "entries": {"/x": {"stat": "no"}}}', b'{"format": 1'])
def test_a_corrupt_cache_file_is_ignored_and_rewritten(home: Path, tmp_path: Path, garbage: bytes) -> None:
    data = tmp_path / "people.csv"
    data.write_bytes(b"id,name\n1,a\n")
    path = pipeline_of(tmp_path, "people.csv")
    (home / CACHE_NAME).write_bytes(garbage)
    settle()
    loaded = load_pipeline(path)
    assert loaded.files["people.csv"] == hashlib.sha256(b"id,name\n1,a\n").hexdigest()
    assert cached(home)[str(data)]["sha256"] == loaded.files["people.csv"]  # rewritten whole


def test_a_cache_entry_naming_the_files_stat_but_not_settled_is_not_trusted(home: Path, tmp_path: Path) -> None:
    """An entry is trusted only if it says the file was settled when it was hashed: one that matches the
    file's stat but was hashed within the racy window (a cache written by hand, or by a bug) is hashed again."""
    data = tmp_path / "people.csv"
    data.write_bytes(b"id,name\n1,a\n")
    st = data.stat()
    stat = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    (home / CACHE_NAME).write_text(json.dumps({"format": 1, "entries": {str(data): {
        "stat": stat, "sha256": "0" * 64, "hashed_at_ns": st.st_ctime_ns + 1}}}))
    loaded = load_pipeline(pipeline_of(tmp_path, "people.csv"))
    assert loaded.files["people.csv"] == hashlib.sha256(b"id,name\n1,a\n").hexdigest()


def test_loading_without_a_home_creates_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONNECTOR_OPS_HOME", str(tmp_path / "nowhere"))
    (tmp_path / "people.csv").write_bytes(b"id\n1\n")
    assert load_pipeline(pipeline_of(tmp_path, "people.csv")).files
    assert not (tmp_path / "nowhere").exists()


def test_the_cache_keeps_only_files_that_exist_and_at_most_its_bound(home: Path, tmp_path: Path) -> None:
    files = [tmp_path / f"f{i}.csv" for i in range(MAX_ENTRIES + 5)]
    for i, file in enumerate(files):
        file.write_text(f"id\n{i}\n")
    gone = tmp_path / "gone.csv"
    gone.write_text("id\n")
    settle()
    cache = DigestCache(home / CACHE_NAME)
    cache.digest(gone)
    cache.save()
    assert list(cached(home)) == [str(gone)]
    gone.unlink()
    cache = DigestCache(home / CACHE_NAME)
    for file in files:
        cache.digest(file)
    cache.save()
    entries = cached(home)
    assert len(entries) == MAX_ENTRIES and str(gone) not in entries
