"""Push of gzip-compressed CSV and JSON: the rows, errors and line numbers of the file it decompresses to,
on the same columnar paths, both databases; progress counts the compressed bytes; a broken file is a 400.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
from typing import Any

import pytest

from connector_ops import ConnectorError, invoke
from connector_ops.etl import actions, push_csv
from connector_ops.kernel.progress import reporting_to
from connector_ops.resources.virtual_files import sqlite_loader
from tests.servers import another_file_server
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


def members(data: bytes, count: int) -> bytes:
    """``data`` gzip-compressed as ``count`` members one after the other (what ``cat a.gz b.gz`` makes)."""
    cuts = [len(data) * i // count for i in range(count + 1)]
    return b"".join(gzip.compress(data[a:b]) for a, b in itertools.pairwise(cuts))


def outcome(files: Any, data: bytes, name: str, content_type: str = "", **parameters: Any) -> list[dict] | str:
    pf = files.add_bytes(data, name, content_type or "application/octet-stream").to_json()
    try:
        return rows(invoke("etl.push", {"platformFile": pf, "parameters": parameters})["virtualFileId"])
    except ConnectorError as exc:
        assert exc.status == 400
        return exc.body["message"]


@pytest.mark.parametrize("count", [1, 3])
def test_a_gzip_csv_pushes_on_the_columnar_path_as_the_file_it_decompresses_to(files, env, slow_paths, count):
    text, delimiter = random_csv(random.Random(1323), stray_quotes=False, rows=30_000, min_rows=25_000,
                                 alphabet=BIG_ALPHABET, ragged=0, empty=1 / 20_000)
    assert len(text) > 1 << 20
    expected = outcome(files, text, "plain.csv", csvDelimiter=delimiter)
    assert isinstance(expected, list) and slow_paths == []
    assert outcome(files, members(text, count), "rows.csv.gz", "application/gzip", csvDelimiter=delimiter) == expected
    assert slow_paths == []


@pytest.mark.parametrize(("name", "content_type"), [("events.ndjson.gz", ""), ("events.json.gz", ""),
                                                    ("events.gz", "application/json")])
def test_gzip_json_pushes_on_the_columnar_path(files, env, slow_paths, name, content_type):
    """NDJSON and a JSON array, known by the name without ``.gz`` or by the content type."""
    records = [{"id": str(i), "note": f"é {i}", **({"n": i} if i % 3 else {})} for i in range(3000)]
    data = ("[\n" + ",\n".join(map(json.dumps, records)) + "\n]\n" if ".json" in name
            else "".join(json.dumps(r) + "\n" for r in records)).encode()
    got = outcome(files, gzip.compress(data), name, content_type)
    assert got == [{k: str(v) for k, v in r.items()} for r in records] and slow_paths == []


@pytest.mark.parametrize(("fault", "name"), [(b"1,2,3\n", "csv"), (b"\xff,x\n", "csv"), (b'{"a": 01}\n', "ndjson")])
def test_errors_name_the_line_of_the_decompressed_file(files, env, fault, name):
    head = b"a,b\n" + b"".join(b"%d,x\n" % i for i in range(5000)) if name == "csv" else \
        b"".join(b'{"a": "%d"}\n' % i for i in range(5000))
    data = head + fault + head[-40:]
    expected = outcome(files, data, f"plain.{name}")
    assert isinstance(expected, str) and "line 500" in expected
    assert outcome(files, gzip.compress(data), f"rows.{name}.gz") == expected


def test_a_broken_gzip_file_is_a_400_and_leaves_nothing(files, env, store):
    data = gzip.compress(b"a,b\n" + b"".join(b"%d,%d\n" % (i, i * 7919 % 100_003) for i in range(200_000)))
    assert len(data) > 100_000
    before = store.inventory()
    for broken, problem in ((data[:-2000], "Compressed file ended"), (data[:30] + b"\0" * 400 + data[430:], "")):
        message = outcome(files, broken, "rows.csv.gz")
        assert isinstance(message, str) and message.startswith("platformFile: the file is gzip-compressed, but its "
                                                               "compressed data is broken") and problem in message
    assert store.inventory() == before


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
