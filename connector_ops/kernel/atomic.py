"""Files that appear whole or not at all: write under a temporary name in the same folder, then rename.

The temporary name carries the writer's process id (``.tmp-<pid>-…``) so that leftovers of a writer that
died (kill -9) can be told from the files of a live one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

TEMP_PREFIX = ".tmp-"


def temp_prefix() -> str:
    """``.tmp-<pid>-``: the prefix of this process's temporary files."""
    return f"{TEMP_PREFIX}{os.getpid()}-"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str], *, file_mode: int | None = None,
                 durable: bool = False) -> Iterator[IO[bytes]]:
    """Yield a binary handle whose bytes replace ``path`` only if the block succeeds.

    ``file_mode`` sets permissions before any byte is written (secrets: ``0o600``); ``durable`` fsyncs
    the data before the rename (a crash then leaves the old file or the new one, never an empty one).
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=temp_prefix())
    try:
        if file_mode is not None:
            os.fchmod(fd, file_mode)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
