"""Zip archives of one file: Push reads the file an archive holds, by that file's name and on the same paths,
with the same rows and errors as the file itself, both databases; an archive of several files, an Excel
workbook, an encrypted or unreadable member, a cut-short download are 400s that say what to do. Pull to a
name ending in ``.zip`` writes an archive of one file that Python's ``zipfile`` and Push read back.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import tempfile
import zipfile

import pytest

from connector_ops import invoke
from connector_ops.etl import compressed
from connector_ops.kernel.progress import reporting_to
from tests.servers import another_file_server
from tests.test_etl_push_columnar import BIG_ALPHABET, random_csv
from tests.test_etl_push_compressed import outcome, pulled_beside_plain, slow_paths  # noqa: F401 (a fixture)
from tests.test_etl_push_parquet import TYPED, parquet
from tests.test_etl_push_pull import rows
from tests.test_progress import Recorder


def zipped(*members: tuple[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    sink = io.BytesIO()
    with zipfile.ZipFile(sink, "w", method) as archive:
        for name, data in members:
            archive.mkdir(name) if name.endswith("/") else archive.writestr(name, data)
    return sink.getvalue()


def patched(archive: bytes, local_offset: int, central_offset: int, value: bytes) -> bytes:
    """``archive`` (of one file) with ``value`` written into its file's local header and its directory entry,
    at each one's offset of the field: how a tool that Python cannot imitate would have written it."""
    data = bytearray(archive)
    for magic, offset in ((b"PK\x03\x04", local_offset), (b"PK\x01\x02", central_offset)):
        at = data.index(magic) + offset
        data[at:at + len(value)] = value
    return bytes(data)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_zip_of_one_csv_pushes_on_the_columnar_path_as_that_csv(files, env, slow_paths, method):  # noqa: F811
    text, delimiter = random_csv(random.Random(2911), stray_quotes=False, rows=20_000, min_rows=15_000,
                                 alphabet=BIG_ALPHABET, ragged=0, empty=1 / 10_000)
    expected = outcome(files, text, "plain.csv", csvDelimiter=delimiter)
    assert isinstance(expected, list) and slow_paths == []
    assert outcome(files, zipped(("export/rows.csv", text), method=method), "download.zip", "application/zip",
                   csvDelimiter=delimiter) == expected
    assert slow_paths == []


@pytest.mark.parametrize("inner", ["events.ndjson", "events.json", "events.ndjson.gz"])
def test_the_file_in_the_archive_names_the_format(files, env, slow_paths, inner):  # noqa: F811
    """NDJSON, a JSON array, and a compressed file inside (decompressed in turn), by the member's name."""
    records = [{"id": str(i), "note": f"ü {i}"} for i in range(2000)]
    data = (json.dumps(records) if inner == "events.json" else "".join(json.dumps(r) + "\n" for r in records)).encode()
    data = gzip.compress(data) if inner.endswith(".gz") else data
    assert outcome(files, zipped((inner, data)), "events.zip", "application/zip") == records
    assert slow_paths == []


def test_folders_and_what_macos_adds_are_not_files_of_the_archive(files, env):
    archive = zipped(("data/", b""), ("data/rows.csv", b"a,b\n1,2\n"), ("__MACOSX/data/._rows.csv", b"\0\5\26\7"),
                     ("data/.DS_Store", b"\0\0\0\1Bud1"))
    assert outcome(files, archive, "rows.zip") == [{"a": "1", "b": "2"}]


def test_the_one_data_file_beside_others_is_read(files, env):
    """A delivery's README or licence beside its one CSV (or JSON, Parquet) does not stop the Push."""
    archive = zipped(("README.txt", b"Orders, weekly.\n"), ("LICENSE", b"CC-BY 4.0\n"),
                     ("export/orders.CSV", b"a,b\n1,2\n"))
    assert outcome(files, archive, "delivery.zip") == [{"a": "1", "b": "2"}]


def test_a_zip_of_a_parquet_file_or_a_compressed_parquet_file_pushes_its_table(files, env):
    expected = outcome(files, parquet(TYPED), "t.parquet")
    assert isinstance(expected, list) and len(expected) == 3
    assert outcome(files, zipped(("t.parquet", parquet(TYPED))), "t.zip") == expected
    assert outcome(files, gzip.compress(parquet(TYPED)), "t.parquet.gz") == expected


def test_errors_name_the_line_of_the_file_in_the_archive(files, env):
    data = b"a,b\n" + b"".join(b"%d,x\n" % i for i in range(3000)) + b"1,2,3\n"
    expected = outcome(files, data, "rows.csv")
    assert isinstance(expected, str) and "line 3002" in expected
    assert outcome(files, zipped(("rows.csv", data)), "rows.zip") == expected


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_progress_counts_the_bytes_of_the_file_in_the_archive(files, env):
    data = b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * i) for i in range(200_000))
    recorder = Recorder()
    with reporting_to(recorder.factory):
        invoke("etl.push", {"platformFile": files.add_bytes(zipped(("big.csv", data)), "big.zip").to_json()})
    assert recorder.reports[-1] == ("push big.zip", len(data), len(data), True)


def test_a_zip_from_another_server_is_copied_once_and_the_copy_removed(files, env, tmp_path, monkeypatch):
    """A zip archive's directory is at its end: a link's bytes go to a temporary file, removed afterwards."""
    data = b"".join(b'{"a": "%d"}\n' % i for i in range(20_000))
    temporary = tmp_path / "temporary"  # this test's own: another worker's Push makes copies in the shared one
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(zipped(("a.ndjson", data)), "a.zip", "application/zip")
        vf = invoke("etl.push", {"platformFile": {"name": pf.name, "link": pf.link,
                                                  "contentType": pf.content_type}})["virtualFileId"]
    assert rows(vf) == [json.loads(line) for line in io.BytesIO(data)]
    assert list(temporary.iterdir()) == []


def _workbook() -> bytes:
    return zipped(("[Content_Types].xml", b"<Types/>"), ("xl/workbook.xml", b"<workbook/>"),
                  ("xl/worksheets/sheet1.xml", b"<worksheet/>"))


@pytest.mark.parametrize(("data", "name", "words"), [
    (_workbook(), "report", "is an Excel workbook (a zip archive of XML): Push reads CSV, JSON and Parquet, also "
                            "compressed or zipped; save the sheet as CSV and push that"),
    (b"PK\x03\x04\x14\x00\x06\x00not even an archive", "sales.xlsx", "is an Excel workbook"),
    (zipped(("a.csv", b"a\n1\n"), ("b.csv", b"b\n2\n")), "two.zip",
     "is a zip archive of 2 files (a.csv, b.csv): Push reads one file; push that file, or a zip archive that "
     "holds only it (or only it as CSV, JSON or Parquet)"),
    (zipped(("notes.txt", b"x\n"), ("report.pdf", b"%PDF")), "other.zip", "is a zip archive of 2 files (notes.txt, "
                                                                           "report.pdf): Push reads one file"),
    (zipped(*((f"part-{i}.csv", b"a\n1\n") for i in range(8))), "parts.zip",
     "is a zip archive of 8 files (part-0.csv, part-1.csv, part-2.csv, part-3.csv, part-4.csv and 3 more)"),
    (zipped(("empty/", b"")), "empty.zip", "is a zip archive that holds no file: nothing was loaded"),
    (zipped(), "nothing.zip", "is a zip archive that holds no file"),
    (zipped(("inner.zip", zipped(("a.csv", b"a\n1\n")))), "outer.zip",
     "the zip archive's file inner.zip is a zip archive too: extract the file you want and push that"),
    (patched(zipped(("a.csv", b"a\n1\n" * 100)), 6, 8, b"\x01"), "secret.zip",
     "is a zip archive whose a.csv is encrypted (it has a password): extract it and push the file itself"),
    (patched(zipped(("a.csv", b"a\n1\n" * 100)), 8, 10, b"\x09"), "big.zip",
     "is a zip archive whose a.csv is compressed by Deflate64 (method 9), which Push cannot read: make the "
     "archive again with Deflate (every zip tool's default), or push the file itself"),
    (zipped(("a.csv", b"a\n" + b"1\n" * 50_000)), "cut.zip", "starts as a zip archive, but its directory at the "
                                                             "end is missing or broken (File is not a zip file)"),
])
def test_what_push_cannot_read_in_a_zip_is_a_400_that_says_why(files, env, store, data, name, words):
    before = store.inventory()
    if name == "cut.zip":  # a download cut short: the end, with the directory, is missing
        data = data[:len(data) // 2]
    message = outcome(files, data, name)
    assert isinstance(message, str) and message.startswith("platformFile: ") and words in message
    assert store.inventory() == before


def test_broken_data_in_the_archive_is_a_400_and_leaves_nothing(files, env, store):
    data = b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 7919 % 100_003) for i in range(100_000))
    archive = bytearray(zipped(("rows.csv", data)))
    archive[len(archive) // 2:len(archive) // 2 + 200] = bytes(200)
    before = store.inventory()
    message = outcome(files, bytes(archive), "rows.zip")
    assert isinstance(message, str) and message.startswith(
        "platformFile: the file is a zip archive, but its compressed data is broken (")
    assert store.inventory() == before


@pytest.mark.parametrize(("export_type", "name", "member"), [("csv", "out.zip", "out.csv"),
                                                             ("json", "reports/out.json.zip", "out.json"),
                                                             ("csv", "out.tsv.zip", "out.tsv")])
def test_pull_to_a_zip_name_writes_an_archive_of_the_export_and_push_reads_it_back(files, env, export_type, name,
                                                                                   member):
    vf, plain, packed_pf, packed = pulled_beside_plain(files, export_type, name)
    with zipfile.ZipFile(io.BytesIO(packed)) as archive:
        assert archive.testzip() is None
        (info,) = archive.infolist()
        assert (info.filename, info.compress_type, info.external_attr >> 16) == (member, zipfile.ZIP_DEFLATED,
                                                                                 0o100644)
        assert archive.read(info) == plain
    assert packed_pf["contentType"] == "application/zip" and packed_pf["size"] == len(packed) < len(plain) // 3
    assert rows(invoke("etl.push", {"platformFile": packed_pf})["virtualFileId"]) == rows(vf)


def test_an_export_in_pieces_is_the_same_archive_whatever_the_pieces():
    """The archive streams as it is written; its file's bytes do not depend on how the export was cut."""
    data = random.Random(5).randbytes(300_000)
    whole = b"".join(compressed.compressing([data], compressed.ZipCompressor("a.csv")))
    cut = b"".join(compressed.compressing((data[i:i + 7777] for i in range(0, len(data), 7777)),
                                          compressed.ZipCompressor("a.csv")))
    for archive in (whole, cut):
        assert zipfile.ZipFile(io.BytesIO(archive)).read("a.csv") == data



@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("name", "member"), [
    ("..\\..\\Startup\\evil.csv.zip", "evil.csv"),  # Windows folders: an extractor there would climb out
    ("C:\\Users\\Public\\evil.csv.zip", "evil.csv"),
    ("C:evil.csv.zip", "evil.csv"),  # relative to drive C's current folder
    ("\\\\server\\share\\evil.csv.zip", "evil.csv"),
    ("../../evil.csv.zip", "evil.csv"),
    ("reports\\..\\.zip", "export.csv"),  # no file name left
    ("..zip", "export.csv"),
])
def test_a_zip_export_holds_a_file_name_never_a_path(files, env, name, member):
    """The member is a plain file name, whatever folders (``/`` or ``\\``) or drive letter an exportName built
    from outside data holds; the platform file keeps the name as given (metadata: stores name files by id)."""
    data = b"a\r\n1\r\n"
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "rows.csv").to_json()})["virtualFileId"]
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": name})["platformFile"]
    with zipfile.ZipFile(io.BytesIO(files.read_bytes(out))) as archive:
        assert archive.namelist() == [member] and archive.read(member) == data
    assert out["name"] == name
