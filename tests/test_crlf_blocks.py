"""A CRLF inside a quoted value, cut between two of Arrow's blocks, keeps its LF (apache/arrow#51368).

Arrow's CSV reader drops an LF that opens a buffer after one that ended with a CR, quoted or not; Push's
columnar path and ``pull_frame`` on PostgreSQL feed it through :class:`.crlf_blocks.WholeCRLF`. Found by the
differential test of files of many blocks (``test_etl_push_columnar``), where one value in 14 MiB came back
without its LF. Each test below but the first fails without the guard on pyarrow 26.0.1 (pyarrow is not
pinned, so no test asserts the upstream bug itself: a release that fixes it must not fail the build).
"""

from __future__ import annotations

import io
import itertools

import pytest

from connector_ops import pull_frame
from connector_ops.resources.virtual_files import arrow_reads, csv_columns
from connector_ops.resources.virtual_files.crlf_blocks import WholeCRLF
from tests.test_csv_copy import Trickle

BLOCK = 64


def straddling(prefix: bytes) -> list[str]:
    """Values holding a CRLF each; the first, written right after ``prefix``, has its CR at byte ``BLOCK - 1``."""
    return ["x" * (BLOCK - len(prefix) - 1) + "\r\ny", *(f"v{i}\r\nw" for i in range(1, 6))]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 64, 1000])
@pytest.mark.parametrize("ask", [2, 3, 7, 64])
def test_no_read_ends_on_the_cr_of_a_crlf_and_the_bytes_are_unchanged(size, ask):
    data = b"\r\n\r\r\n\n\r" * 9 + b"a\r\nb\r" + b"\r\n" * 20 + b"\r"
    stream, reads = WholeCRLF(io.BufferedReader(Trickle(data, size), size)), []
    while chunk := stream.read(ask):
        assert len(chunk) <= ask
        reads.append(chunk)
    assert b"".join(reads) == data
    assert not any(a.endswith(b"\r") and b.startswith(b"\n") for a, b in itertools.pairwise(reads))


def test_push_reads_a_straddling_crlf_whole(monkeypatch):
    monkeypatch.setattr(csv_columns, "BLOCK", BLOCK)
    values = straddling(b'0,"')
    data = b"".join(f'{i},"{v}"\n'.encode() for i, v in enumerate(values))
    assert data[BLOCK - 1:BLOCK + 1] == b"\r\n"
    batches = csv_columns.csv_batches(io.BytesIO(data), 2, ",")
    assert [v for batch in batches for v in batch.column("c1").to_pylist()] == values


def test_pull_frame_reads_a_straddling_crlf_whole(env, store, monkeypatch):
    """On PostgreSQL the server's ``COPY … TO`` output is what Arrow reads, in blocks; SQLite's pages are
    never CSV, and must give the same."""
    monkeypatch.setattr(arrow_reads, "BLOCK", BLOCK)
    values = straddling(b'"0","')  # COPY quotes every value
    vf = store.create_from_rows([{"n": str(i), "v": v} for i, v in enumerate(values)])
    assert pull_frame(vf)["v"].tolist() == values
