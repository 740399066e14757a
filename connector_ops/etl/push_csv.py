"""Push of a CSV file: the columnar fast path first, the row-by-row ``csv`` reader when it must.

The fast path (:mod:`.csv_fast` into the store's ``create_from_arrow``) reads exactly what the slow path
reads whenever it finishes; when it cannot (another encoding, unusual quoting, a ragged row, bytes that
are not UTF-8, anything else), its transaction is rolled back and the file is read again by
:func:`.readers.read_csv`, which gives the documented result or the exact error, as before. So every
error message comes from one place, and a bad file costs one extra read.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from connector_ops.etl import models as m
from connector_ops.etl.csv_fast import data_rows
from connector_ops.etl.readers import read_csv
from connector_ops.kernel.errors import UpstreamError, gave_up_because
from connector_ops.kernel.progress import reading_with_progress, track
from connector_ops.kernel.streams import Open

if TYPE_CHECKING:
    from connector_ops.etl.quarantine import Quarantine
    from connector_ops.resources.virtual_files.store import VirtualFileStore

log = logging.getLogger(__name__)

#: tests switch the fast path off to run every case through the slow one
FAST = True


def push_csv(store: VirtualFileStore, open_file: Open, name: str, size: int | None,
             params: m.PushParameters, quarantine: Quarantine | None = None, *, text_size: int | None = None) -> str:
    """Load the CSV file ``open_file`` opens into a new virtual file; returns its id. With a ``quarantine``,
    ragged rows are refused into it (the fast path gives up on them, so only the row reader refuses).
    ``size`` is what progress counts; ``text_size``, the text's bytes when they are more (a compressed file),
    chooses the path."""
    options: dict[str, Any] = {  # read_csv's keyword arguments, each of its own type
        "delimiter": params.csv_delimiter, "lines_to_ignore": params.lines_to_ignore,
        "header": bool(params.use_first_row_as_schema), "schema": params.schema_, "encoding": params.encoding}
    label = f"push {name}"
    if FAST and store.columnar_load_pays(size if text_size is None else text_size):
        vf_id, gave_up = _fast(store, open_file, name, size, options)
        if vf_id is not None:
            return vf_id
        if gave_up:  # a new bar, not the first one restarting under its name
            label = f"push {name} (again, row by row)"
    with open_file() as raw, track(label, size, "B") as reporter:
        columns, batches = read_csv(reading_with_progress(raw, reporter), reopen=open_file, quarantine=quarantine,
                                    **options)
        return store.create_from_batches(columns, batches)  # parsing overlaps the database's inserts


def _fast(store: VirtualFileStore, open_file: Open, name: str, size: int | None,
          options: dict) -> tuple[str | None, bool]:
    """``(the virtual file's id, False)``, or ``(None, gave_up)`` when the slow path must read the file
    (nothing was written); ``gave_up`` when the load began and stopped (not when the file's start showed it
    is not for this path). On
    PostgreSQL the bytes go to ``COPY`` as they are; a file with lines ``COPY`` would read otherwise (empty
    ones, ``\\.`` alone) is read again through Arrow. A pass that gives up ends its bar as given up
    (``track(…, then_again=True)``), so a log line reads neither as a finished Push nor as a failed one."""
    from connector_ops.resources.virtual_files.csv_copy import NotForCopy

    for label, through_arrow in ((f"push {name}", False), (f"push {name} (again, through Arrow)", True)):
        try:
            with open_file() as raw, track(label, size, "B", then_again=True) as reporter:
                opened = data_rows(reading_with_progress(raw, reporter), **options)
                if opened is None:
                    return None, False
                return store.create_from_csv(*opened, options["delimiter"], through_arrow=through_arrow), False
        except NotForCopy:
            continue
        except UpstreamError:  # the file's server failed, not its bytes: reading it again would wait again
            raise
        except Exception as exc:  # whatever went wrong, the slow path reads the file and words the error
            log.debug("push %s: the columnar path gave up (%s); reading it row by row", name,
                      gave_up_because(exc))
            return None, True
    return None, True
