"""The progress bar of a Jupyter kernel: one output of the cell, drawn through an IPython display handle.

``tqdm.notebook``'s widget stayed in the notebook once closed: ``jupyter nbconvert --execute`` (papermill,
CI reports) saved every long cell with its bar as first drawn (``push big.csv: 10%|# | 8.39M/83.2M``) and the
state of each of its widgets (six models a bar, made even for work too short to show one). This bar is an
HTML ``<progress>`` with tqdm's figures beside it, shown only after ``delay`` seconds, redrawn in place
(``update_display_data``) at most every ``interval`` seconds, and replaced by nothing when it closes, however
the work ended: no widget, and no output left but an empty one, live or saved.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any

#: what a closed bar leaves: JupyterLab draws nothing for it, and a saved notebook holds no trace of the bar
_NOTHING = {"text/html": "", "text/plain": ""}


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (what ``tqdm.auto`` asks before choosing its widget)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


class NotebookBar:
    """A reporter (``update``/``close``) showing ``description``'s progress in the current cell's output."""

    def __init__(self, description: str, total: int | None, unit: str, *, delay: float = 0.5,
                 interval: float = 0.3) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.delay, self.interval, self.done = delay, interval, 0
        self.started = time.monotonic()
        self.drawn = 0.0
        self.handle: Any = None

    def update(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.started >= self.delay and now - self.drawn >= self.interval:
            self.drawn = now
            self._draw(now - self.started)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.update(_NOTHING, raw=True)
            self.handle = None

    def _draw(self, elapsed: float) -> None:
        from IPython.display import display

        bundle = self._bundle(elapsed)
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)

    def _bundle(self, elapsed: float) -> dict[str, str]:
        """The bar as HTML (a ``<progress>``, indeterminate without a total) and as text (tqdm's line)."""
        from tqdm.std import tqdm

        unit = self.unit or "it"
        if self.total:
            figures = "{percentage:3.0f}% {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]"
        elif self.unit:
            figures = "{n_fmt} [{elapsed}, {rate_fmt}]"
        else:  # a phase: its time only
            figures = "[{elapsed}]"
        # (no total: no percentage, as tqdm documents; its stub types total a float)
        stats = tqdm.format_meter(self.done, self.total, elapsed,  # type: ignore[arg-type]
                                  unit=unit, unit_scale=True, bar_format=figures)
        value = f' value="{min(self.done, self.total)}" max="{self.total}"' if self.total else ""
        markup = (
            '<div style="display:flex;gap:0.6em;align-items:center;font-family:var(--jp-code-font-family,monospace)">'
            f'<span style="white-space:nowrap">{html.escape(self.description)}</span>'
            f'<progress{value} style="flex:0 1 24em"></progress>'
            f'<span style="white-space:nowrap">{html.escape(stats)}</span></div>'
        )
        return {"text/html": markup, "text/plain": f"{self.description}: {stats}"}
