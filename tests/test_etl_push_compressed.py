"""Push of compressed CSV and JSON (gzip, bzip2, xz, zstd): the rows, errors and line numbers of the file it
decompresses to, on the same columnar paths, both databases; progress counts the compressed bytes; a broken
file is a 400. Pull to a compressed name compresses. (Zip archives: ``test_etl_zip.py``.)
"""

from __future__ import annotations

import bz2
import gzip
import io
import itertools
import json
import lzma
import random
import zipfile
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import actions, push_csv
from connector_ops.etl.compressed import COMPRESSIONS, Decompressed, zstd
from connector_ops.kernel.progress import reporting_to
from connector_ops.resources.virtual_files import sqlite_loader
from tests.servers import another_file_server
from tests.test_csv_copy import Trickle
from tests.test_etl_push_columnar import BIG_ALPHABET, random_csv
from tests.test_etl_push_pull import rows
from tests.test_progress import Recorder


@pytest.fixture
def slow_paths(monkeypatch) -> list[str]:
    """The columnar paths for every size; which row readers ran (CSV's ``csv`` module, JSON's row reader)."""
    monkeypatch.setattr(sqlite_loader, "SQLITE_CHILD_MIN_BYTES", 0)
    ran: list[str] = []
    for module, name in ((push_csv, "read_csv"), (actions, "read_json")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, real=real, name=name, **k: ran.append(name) or real(*a, **k))
    return ran


#: each compression's suffix and its compress() (zstd's writes libzstd's default frame: without the checksum
#: the ``zstd`` command and Pull add)
COMPRESS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress, ".zst": zstd.compress}


def members(data: bytes, count: int, suffix: str = ".gz") -> bytes:
    """``data`` compressed as ``count`` streams one after the other (what ``cat a.gz b.gz`` makes)."""
    cuts = [len(data) * i // count for i in range(count + 1)]
    return b"".join(COMPRESS[suffix](data[a:b]) for a, b in itertools.pairwise(cuts))


def outcome(files: Any, data: bytes, name: str, content_type: str = "", **parameters: Any) -> list[dict] | str:
    pf = files.add_bytes(data, name, content_type or "application/octet-stream").to_json()
    try:
        return rows(invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"])
    except ConnectorError as exc:
        assert exc.status == 400
        return exc.body["message"]


@pytest.mark.parametrize(("suffix", "count"), [(".gz", 1), (".gz", 3), (".bz2", 2), (".xz", 2), (".zst", 3)])
def test_a_compressed_csv_pushes_on_the_columnar_path_as_the_file_it_decompresses_to(files, env, slow_paths,
                                                                                     suffix, count):
    text, delimiter = random_csv(random.Random(1323), stray_quotes=False, rows=30_000, min_rows=25_000,
                                 alphabet=BIG_ALPHABET, ragged=0, empty=1 / 20_000)
    assert len(text) > 1 << 20
    expected = outcome(files, text, "plain.csv", csvDelimiter=delimiter)
    assert isinstance(expected, list) and slow_paths == []
    compressed = members(text, count, suffix)
    assert outcome(files, compressed, f"rows.csv{suffix}", "application/gzip", csvDelimiter=delimiter) == expected
    assert slow_paths == []


@pytest.mark.parametrize(("name", "content_type"), [("events.ndjson.gz", ""), ("events.json.gz", ""),
                                                    ("events.gz", "application/json"), ("events.ndjson.xz", ""),
                                                    ("events.json.zst", "")])
def test_compressed_json_pushes_on_the_columnar_path(files, env, slow_paths, name, content_type):
    """NDJSON and a JSON array, known by the name without ``.gz`` or by the content type."""
    records = [{"id": str(i), "note": f"é {i}", **({"n": i} if i % 3 else {})} for i in range(3000)]
    data = ("[\n" + ",\n".join(map(json.dumps, records)) + "\n]\n" if ".json" in name
            else "".join(json.dumps(r) + "\n" for r in records)).encode()
    got = outcome(files, COMPRESS["." + name.rsplit(".", 1)[1]](data), name, content_type)
    assert got == [{k: str(v) for k, v in r.items()} for r in records] and slow_paths == []


@pytest.mark.parametrize(("fault", "name"), [(b"1,2,3\n", "csv"), (b"\xff,x\n", "csv"), (b'{"a": 01}\n', "ndjson")])
def test_errors_name_the_line_of_the_decompressed_file(files, env, fault, name):
    head = b"a,b\n" + b"".join(b"%d,x\n" % i for i in range(5000)) if name == "csv" else \
        b"".join(b'{"a": "%d"}\n' % i for i in range(5000))
    data = head + fault + head[-40:]
    expected = outcome(files, data, f"plain.{name}")
    assert isinstance(expected, str) and "line 500" in expected
    assert outcome(files, gzip.compress(data), f"rows.{name}.gz") == expected


@pytest.mark.parametrize(("suffix", "name"), [(".gz", "gzip"), (".bz2", "bzip2"), (".xz", "xz"), (".zst", "zstd")])
def test_a_broken_compressed_file_is_a_400_and_leaves_nothing(files, env, store, suffix, name):
    data = COMPRESS[suffix](b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 7919 % 100_003) for i in range(200_000)))
    assert len(data) > 100_000
    before = store.inventory()
    middle = len(data) // 2  # damaged there, the data may decompress to garbage that fails as text first
    for broken in (data[:-2000], data[:30] + b"\0" * 400 + data[430:],
                   data[:middle] + bytes(200) + data[middle + 200:]):
        message = outcome(files, broken, f"rows.csv{suffix}")
        assert isinstance(message, str) and message.startswith(f"platformFile: the file is {name}-compressed, but "
                                                               "its compressed data is broken (")
    assert store.inventory() == before


def test_a_zstd_file_may_start_with_a_skippable_frame_as_pzstd_writes_it(files, env):
    """``pzstd`` (zstd's parallel command) starts its files with a skippable frame of its own; so may others."""
    data = b"a,b\n" + b"".join(b"%d,y\n" % i for i in range(50_000))
    skippable = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"\0\0\0\0"
    assert outcome(files, skippable + zstd.compress(data[:300_000]) + zstd.compress(data[300_000:]),
                   "rows.csv.zst") == outcome(files, data, "rows.csv")


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_compressed_file_under_the_threshold_as_stored_but_not_as_text_goes_column_wise(files, env, monkeypatch):
    """SQLite chooses the loader process by the text's size: a compressed file counts for its text, taken
    as 3 times its bytes, so 1.5-4 MiB of gzip (5-12 MiB of CSV) is not left to the row reader."""
    ran: list[str] = []
    real = push_csv.read_csv
    monkeypatch.setattr(push_csv, "read_csv", lambda *a, **k: ran.append("row reader") or real(*a, **k))
    rng = random.Random(4)
    data = b"a,b,c\n" + b"".join(b"%d,%d,%d\n" % (rng.getrandbits(40), rng.getrandbits(30), i)
                                  for i in range(120_000))
    packed = gzip.compress(data)
    assert sqlite_loader.SQLITE_CHILD_MIN_BYTES // 3 < len(packed) < sqlite_loader.SQLITE_CHILD_MIN_BYTES
    assert len(rows(invoke("etl.push", {"platformFile": files.add_bytes(packed, "r.csv.gz").to_json()})[
        "virtualFileId"])) == 120_000
    assert ran == []


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_progress_counts_the_compressed_bytes(files, env):
    data = gzip.compress(b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * i) for i in range(200_000)))
    recorder = Recorder()
    with reporting_to(recorder.factory):
        invoke("etl.push", {"platformFile": files.add_bytes(data, "big.csv.gz").to_json()})
    assert recorder.reports[-1] == ("push big.csv.gz", len(data), len(data), True)


def test_a_gzip_link_of_another_server_is_decompressed(files, env, tmp_path, monkeypatch):
    """A link's bytes are kept as they come (compressed) and decompressed at each read of the Push."""
    data = b"".join(b'{"a": "%d"}\n' % i for i in range(20_000))
    with another_file_server(tmp_path / "remote", monkeypatch) as remote:
        pf = remote.add_bytes(gzip.compress(data), "a.ndjson.gz", "application/gzip")
        vf = invoke("etl.push", {"platformFile": {"name": pf.name, "link": pf.link,
                                                  "contentType": pf.content_type}})["virtualFileId"]
    assert rows(vf) == [json.loads(line) for line in io.BytesIO(data)]


class _FailingDisk(Trickle):
    """:class:`Trickle`'s bytes, then the disk's error where they end."""

    def readinto(self, buffer) -> int:
        if not self.data:
            raise OSError(5, "Input/output error")
        return super().readinto(buffer)


@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: c.name)
def test_the_sources_own_failure_is_not_called_broken_data(compression):
    """bz2 says a bare ``OSError`` for broken data; a disk's ``OSError`` while reading must stay itself."""
    data = COMPRESS[compression.suffix](random.Random(7).randbytes(300_000))
    with pytest.raises(OSError, match="Input/output error"):
        Decompressed(io.BufferedReader(_FailingDisk(data[:len(data) // 2], 4096)), compression).read()


def test_compressed_text_in_another_encoding_with_a_quarantine_gives_what_the_plain_file_gives(resources):
    """The pieces together: an xz-compressed cp1252 CSV with ragged rows, pushed with a quarantine, loads the
    same rows and refuses the same lines (numbers and text) as the same file uncompressed."""
    text = "id;name\n" + "".join(f"{i};café {i}\n" if i % 997 else f"{i};bad;row €\n" for i in range(20_000))
    data = text.encode("cp1252")

    def pushed(content: bytes, name: str) -> tuple[list[dict], list[dict]]:
        pf = resources["platform_files"].add_bytes(content, name).to_json()
        out = invoke("etl.push", {"platformFile": pf, "parameters": {
            "csvDelimiter": ";", "encoding": "cp1252", "onRowError": "quarantine"}}, resources)
        store = resources["virtual_files"]
        return (store.summary(out["virtualFileId"], 30_000)[2], store.summary(out["rejectsFileId"], 100)[2])

    plain = pushed(data, "rows.csv")
    assert len(plain[1]) == 21 and plain[1][0]["text"] == "0;bad;row €" and plain[0][0] == {"id": "1", "name": "café 1"}
    assert pushed(lzma.compress(data), "rows.csv.xz") == plain


@pytest.mark.parametrize(("export_type", "suffix"), [("csv", ".gz"), ("json", ".bz2"), ("csv", ".xz"),
                                                     ("json", ".zst")])
def test_pull_compresses_when_the_export_name_asks_and_push_reads_it_back(files, env, export_type, suffix):
    """The compressed export decompresses to the plain export's bytes, says its compression as its content
    type, and pushes back to the same rows."""
    vf, plain, packed_pf, packed = pulled_beside_plain(files, export_type, f"out.{export_type}{suffix}")
    assert {".gz": gzip.decompress, ".bz2": bz2.decompress, ".xz": lzma.decompress,
            ".zst": zstd.decompress}[suffix](packed) == plain
    assert len(packed) < len(plain) // 3 and packed_pf["size"] == len(packed)
    assert packed_pf["contentType"] == {".gz": "application/gzip", ".bz2": "application/x-bzip2",
                                        ".xz": "application/x-xz", ".zst": "application/zstd"}[suffix]
    again = invoke("etl.push", {"platformFile": packed_pf})["virtualFileId"]
    assert rows(again) == rows(vf)


def test_a_zstd_pull_carries_a_checksum_that_finds_damage_the_data_alone_hides(files, env):
    """Pull writes zstd with the content's checksum, as the ``zstd`` command does. A byte changed where the
    frame still decodes (a literal) is found by that checksum alone: the same damage in the same frame
    without it decodes to other text."""
    _, plain, _, packed = pulled_beside_plain(files, "csv", "out.csv.zst")
    assert packed[:4] == b"\x28\xb5\x2f\xfd" and packed[4] & 0x04  # the frame header's checksum flag
    unchecked = packed[:4] + bytes([packed[4] & ~0x04]) + packed[5:-4]
    assert zstd.decompress(unchecked) == plain

    def hidden(at: int) -> bool:  # the byte at ``at`` changed, and the frame without a checksum decodes
        try:
            return zstd.decompress(unchecked[:at] + bytes([unchecked[at] ^ 0x01]) + unchecked[at + 1:]) != plain
        except zstd.ZstdError:
            return False

    at = next(at for at in range(len(unchecked) // 2, len(unchecked) - 8) if hidden(at))
    damaged = packed[:at] + bytes([packed[at] ^ 0x01]) + packed[at + 1:]
    message = outcome(files, damaged, "rows.csv.zst")
    assert isinstance(message, str) and message.startswith(
        "platformFile: the file is zstd-compressed, but its compressed data is broken (")


def pulled_beside_plain(files: Any, export_type: str, name: str) -> tuple[str, bytes, dict, bytes]:
    """20,000 rows pushed, then pulled as ``export_type`` plain and to ``name``: the virtual file's id, the
    plain export's bytes, and the named export's descriptor and bytes."""
    data = "id,name,note\n" + "".join(f"{i},café {i},{'x' * (i % 50)}\n" for i in range(20_000))
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data.encode(), "rows.csv").to_json()})["virtualFileId"]

    def pulled(export_name: str) -> tuple[dict, bytes]:
        out = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": export_name})
        return out["platformFile"], files.read_bytes(out["platformFile"])

    _, plain = pulled("plain.tsv" if ".tsv." in name else f"plain.{export_type}")  # a .tsv is written with tabs
    return vf, plain, *pulled(name)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("export_type", "name", "content_type", "magic"), [
    ("csv", "out.csv.gz ", "application/gzip", b"\x1f\x8b"),  # pasted with a trailing space
    ("json", " out.json.Zst  ", "application/zstd", b"\x28\xb5\x2f\xfd"),
    ("csv", "out.zip ", "application/zip", b"PK"),
])
def test_an_export_name_with_spaces_around_it_packs_as_push_reads_it(files, env, export_type, name, content_type,
                                                                     magic):
    """Pull once read the suffix on the name as given, so ``out.csv.gz `` was written uncompressed; it reads
    it as Push does (connector_ops.etl.suffixes), and Push reads the export back as the name says."""
    vf = invoke("etl.push", {"platformFile": files.add_bytes(b"a,b\n1,2\n", "rows.csv").to_json()})["virtualFileId"]
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": name})["platformFile"]
    data = files.read_bytes(out)
    assert (out["name"], out["contentType"], data[:len(magic)]) == (name, content_type, magic)
    if magic == b"PK":
        assert zipfile.ZipFile(io.BytesIO(data)).namelist() == ["out.csv"]
    assert rows(invoke("etl.push", {"platformFile": out})["virtualFileId"]) == rows(vf)


@pytest.mark.parametrize("suffix", [".gz", ".zip"])
def test_a_parquet_export_named_for_compression_is_a_400(files, env, suffix):
    vf = invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "rows.csv").to_json()})["virtualFileId"]
    with pytest.raises(ConnectorError) as info:
        invoke("etl.pull", {"virtualFileId": vf, "exportType": "parquet", "exportName": f"out.parquet{suffix}"})
    assert info.value.status == 400 and info.value.body["message"] == (
        f"exportName: a Parquet export compresses its columns itself: name it without {suffix}")


@pytest.mark.parametrize(("export_type", "name", "message"), [
    ("csv", "out.parquet", "'out.parquet' names a parquet file, but exportType is csv: end it in .csv, or ask "
                           "for exportType parquet"),
    ("json", "out.csv.gz", "'out.csv.gz' names a csv file, but exportType is json: end it in .json, or ask for "
                           "exportType csv"),
    ("csv", "out.csv.gz.zip", "'out.csv.gz.zip' asks for two packings: keep one of .gz and .zip"),
    ("parquet", "out.json", "'out.json' names a json file, but exportType is parquet: end it in .parquet, or ask "
                            "for exportType json"),
])
def test_an_export_name_for_other_data_or_two_packings_is_a_400(files, env, export_type, name, message):
    """Such an export was written under the name, and Push then read it as what the name says (a CSV named
    .parquet: "not a Parquet file"), or a zip held a plain file named .gz."""
    vf = invoke("etl.push", {"platformFile": files.add_bytes(b"a\n1\n", "rows.csv").to_json()})["virtualFileId"]
    before = files.inventory()
    with pytest.raises(ConnectorError) as info:
        invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": name})
    assert (info.value.status, info.value.message) == (400, f"exportName: {message}")
    assert files.inventory() == before


@pytest.mark.parametrize("header", [b"BZh", b"BZh9", b"BZh91AY", b"PK", b"P*M"])
def test_text_that_starts_like_a_compressed_file_is_text(files, env, header):
    """Only the whole magic makes a file compressed: a CSV whose header starts with bzip2's "BZh" is a CSV."""
    assert outcome(files, header + b"Code,x\n1,2\n", "rows.csv") == [{header.decode() + "Code": "1", "x": "2"}]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("export_type", "name", "content_type"), [
    ("csv", "out.csv.gz", "application/gzip; charset=ISO-8859-1"),
    ("json", "out.ndjson.xz", "application/x-xz; charset=ISO-8859-1"),
    ("csv", "out.zip", "application/zip; charset=ISO-8859-1"),
])
def test_a_compressed_export_in_another_encoding_keeps_its_charset_and_pushes_back(files, env, export_type, name,
                                                                                   content_type):
    """A compressed export once said only its compression (``application/gzip``), dropping the charset, so a
    latin-1 one did not push back from its descriptor alone: it keeps the charset on the compression's type."""
    data = "city\nMontréal\nKöln\n".encode()
    vf = invoke("etl.push", {"platformFile": files.add_bytes(data, "rows.csv").to_json()})["virtualFileId"]
    out = invoke("etl.pull", {"virtualFileId": vf, "exportType": export_type, "exportName": name,
                              "parameters": {"encoding": "latin-1"}})["platformFile"]
    assert out["contentType"] == content_type
    assert rows(invoke("etl.push", {"platformFile": out})["virtualFileId"]) == rows(vf)
