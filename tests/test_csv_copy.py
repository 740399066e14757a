"""Plain CSV straight into PostgreSQL's ``COPY`` (csv_copy): the lines ``COPY`` reads otherwise than the
``csv`` module — an empty line, a line that is ``\\.`` alone — are found at any chunk boundary, trailing line
breaks are dropped, and such files still load exactly as the ``csv`` module reads them (through Arrow)."""

from __future__ import annotations

import csv
import io
import random
import re

import pytest

from connector_ops import invoke
from connector_ops.resources.virtual_files.csv_copy import CopyableLines, NotForCopy
from tests.test_etl_push_pull import rows

PIECES = [b"a", b"bc", b",", b'"q"', b"\\.", b"\\", b".", b"\n", b"\r\n", b"\r", b"\xc3\xa9", b" "]


class Trickle(io.RawIOBase):
    """``data`` handed out ``size`` bytes at a time, whatever is asked for."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk, self.data = self.data[:self.size], self.data[self.size:]
        buffer[:len(chunk)] = chunk
        return len(chunk)


def oracle(data: bytes) -> bytes | None:
    """What may go to COPY (None: nothing, load it through Arrow), from the lines alone: trailing line breaks
    dropped; any other empty line, or a line that is \\. alone, refused."""
    body = data.rstrip(b"\r\n")
    lines = re.split(rb"\r\n|\r|\n", body)
    if body and any(line in (b"", b"\\.") for line in lines):
        return None
    return body


def through(data: bytes, size: int) -> bytes | None:
    try:
        return CopyableLines(Trickle(data, size)).read()
    except NotForCopy:
        return None


def test_the_lines_copy_may_read_are_found_at_any_chunk_boundary() -> None:
    rnd = random.Random(1313)
    refused = 0
    for _ in range(600):
        data = b"".join(rnd.choices(PIECES, k=rnd.randint(0, 30)))
        expected = oracle(data)
        refused += expected is None
        for size in (1, 2, 3, 7, 64):
            assert through(data, size) == expected, (data, size)
    assert 100 < refused < 500  # both outcomes are exercised


@pytest.mark.parametrize("data", [
    b"a,b\n1,2\n\n3,4\n",            # an empty line inside
    b"a,b\n\n1,2\n",                 # an empty line first
    b"a,b\n1,2\n\r\n\r\n",           # trailing CRLF empty lines
    b"v\nx\n\\.\ny\n",                # a line COPY would take for the end of the data
    b"v\nx\n\\.",                     # ... and as the last line
    b'a,b\n1,"two\n\nlines"\n3,4\n',  # an empty line inside a quoted value: data, not a line
    b'v\n"\\."\n',                    # a quoted \. is a value
])
def test_files_copy_reads_otherwise_load_as_the_csv_module_reads_them(files, env, data) -> None:
    pf = files.add_bytes(data, "f.csv", "text/csv").to_json()
    vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
    header, *body = [r for r in csv.reader(io.StringIO(data.decode(), newline="")) if r]
    assert rows(vf) == [dict(zip(header, r, strict=True)) for r in body]
