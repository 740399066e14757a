"""Long work reports progress through whatever reporter the entry point installed."""

from __future__ import annotations

import pytest

from connector_ops import invoke
from connector_ops.kernel.progress import reporting_to


class Recorder:
    def __init__(self) -> None:
        self.reports: list[tuple[str, int | None, int, bool]] = []

    def factory(self, description: str, total: int | None, unit: str) -> Recorder.Bar:
        return Recorder.Bar(self, description, total)

    class Bar:
        def __init__(self, recorder: Recorder, description: str, total: int | None) -> None:
            self.recorder, self.description, self.total, self.done = recorder, description, total, 0

        def update(self, n: int) -> None:
            self.done += n

        def close(self) -> None:
            self.recorder.reports.append((self.description, self.total, self.done, True))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_push_pull_upload_and_download_report_their_bytes(files, env):
    data = b"a,b\n" + b"1,2\n" * 50_000
    pf = files.add_bytes(data, "big.csv").to_json()
    recorder = Recorder()
    with reporting_to(recorder.factory):
        vf = invoke("etl.push", {"platformFile": pf})["virtualFileId"]
        pulled = invoke("etl.pull", {"virtualFileId": vf, "exportType": "csv", "exportName": "o.csv"})["platformFile"]
        file_id = invoke("drive.upload_file", {"platformFile": pf})["fileId"]
        downloaded = invoke("drive.download_file", {"fileId": file_id})["platformFile"]
    by_name = {d: (total, done) for d, total, done, _ in recorder.reports}
    assert by_name["push big.csv"] == (len(data), len(data))
    assert by_name["pull o.csv"][1] == pulled["size"]
    assert by_name["download big.csv"] == (downloaded["size"], downloaded["size"])
    assert all(closed for *_, closed in recorder.reports)  # every bar is closed (disappears) when done
