"""Push's ``onRowError: quarantine``: the lines a Push refuses, kept instead of failing the whole file.

The spec's Push fails on the first bad row, which is right for a file that must be whole and wrong for a
daily feed where three lines in a million are ragged: users then want the million rows loaded *and* the
three lines kept with why they were refused (a dead-letter queue), not silently dropped. What can be
quarantined is what can be cut out by line: a CSV row with the wrong number of fields, an NDJSON line that
is not a JSON object. A problem that loses the line structure (an unterminated quote, bytes that are not
the file's encoding, a broken JSON array) still fails the Push, since no later line could be trusted.

Refused lines are spooled to a temporary file, so a file with millions of bad lines stays in bounded memory,
then stored as a virtual file with the columns ``line``, ``reason`` and ``text``.
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Iterator

from connector_ops.kernel.disk import temp_floor
from connector_ops.kernel.scoped import batched

#: the rejects virtual file's columns
COLUMNS = ["line", "reason", "text"]
BATCH = 10_000


class Quarantine:
    """Collects refused lines on disk; :meth:`batches` reads them back for the rejects virtual file."""

    def __init__(self) -> None:
        floor = temp_floor()  # the refused lines grow TMPDIR
        self._file = tempfile.TemporaryFile("w+", newline="", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._writer = csv.writer(floor.guard(self._file))
        self.count = 0

    def refuse(self, line: int, reason: str, text: str) -> None:
        self._writer.writerow([str(line), reason, text])
        self.count += 1

    def batches(self) -> Iterator[list[list[str]]]:
        self._file.flush()
        self._file.seek(0)
        yield from batched(csv.reader(self._file), BATCH)

    def close(self) -> None:
        self._file.close()


def record_text(record: list[str], delimiter: str) -> str:
    """A parsed CSV record written back as one CSV line (quoted where needed), for the ``text`` column."""
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(record)
    return out.getvalue()
