"""``connector_ops.progress()``: the Python API's switch for progress bars.

A library call (``invoke``, ``push_frame``, ``pull_frame``) is silent by default: a script or a service
must not get bars on its stderr it did not ask for. Inside ``with connector_ops.progress():`` long work
(push, pull, query, map, upload, download, a frame's rows) shows a bar — an output of the cell in Jupyter,
tqdm's text on a terminal — as the command line and the magics show it; or reports to the factory given.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from connector_ops.kernel.progress import ReporterFactory, reporting_to, tqdm_reporter


@contextlib.contextmanager
def progress(reporter: ReporterFactory | None = None) -> Iterator[None]:
    """Show the progress of the calls made inside the block (this thread or task; usable as a decorator).

    ``reporter`` replaces the bars: ``reporter(description, total, unit)`` is called once per piece of work
    (``"push big.csv"``, its size or ``None``, ``"B"`` or ``"rows"``) and returns an object with
    ``update(n)`` (``n`` more units done) and ``close()`` — to log progress, or to drive a UI of your own."""
    with reporting_to(reporter or tqdm_reporter):
        yield
