"""``connector_ops.progress()``: the Python API is silent by default and shows progress inside the switch."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import connector_ops
from connector_ops import invoke, progress, pull_frame, push_frame


class Recorder:
    """A reporter factory keeping what each piece of work reported (description, total, unit, units done)."""

    def __init__(self) -> None:
        self.works: list[dict[str, Any]] = []

    def __call__(self, description: str, total: int | None, unit: str) -> Any:
        work = {"description": description, "total": total, "unit": unit, "done": 0, "closed": False}
        self.works.append(work)

        class Reporter:
            def update(self, n: int) -> None:
                work["done"] += n

            def close(self) -> None:
                work["closed"] = True

        return Reporter()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_calls_inside_progress_report_and_calls_outside_stay_silent(env: dict[str, str], files: Any,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``invoke``, ``push_frame`` and ``pull_frame`` never showed progress, and nothing public could turn it on
    (``reporting_to`` lived in the kernel, unexported). ``connector_ops.progress()`` is the switch, exported."""
    assert "progress" in connector_ops.__all__
    text = b"id,name\n" + b"".join(b"%d,n%d\n" % (i, i) for i in range(5_000))
    pf = files.add_bytes(text, "rows.csv", "text/csv").to_json()
    recorder = Recorder()
    with progress(recorder):
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
        frame_vf = push_frame(pd.DataFrame({"a": range(300)}))
        assert len(pull_frame(frame_vf)) == 300
    assert recorder.works == [
        {"description": "push rows.csv", "total": len(text), "unit": "B", "done": len(text), "closed": True},
        {"description": "push DataFrame", "total": 300, "unit": "rows", "done": 300, "closed": True},
        {"description": "pull DataFrame", "total": None, "unit": "rows", "done": 300, "closed": True},
    ]
    invoke("etl.push", {"platformFile": pf})  # outside the block: silent again, as a library call should be
    assert len(recorder.works) == 3
    assert capsys.readouterr().err == ""
    assert vf


def test_progress_shows_tqdm_bars_by_default() -> None:
    """Without a reporter, the work inside the block gets :func:`tqdm_reporter`'s bar: tqdm's text here, out
    of a Jupyter kernel (in one, an output of the cell)."""
    from tqdm import tqdm

    from connector_ops.kernel.progress import track

    with progress(), track("push x.csv", 10, "B") as reporter:
        assert isinstance(reporter, tqdm) and reporter.desc == "push x.csv" and reporter.total == 10
    with track("push x.csv", 10, "B") as reporter:
        assert not isinstance(reporter, tqdm)
