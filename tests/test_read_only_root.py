"""A container with a read-only root file system (Kubernetes' ``readOnlyRootFilesystem: true``), a ``HOME``
that does not exist (an arbitrary uid without a passwd entry) and writable volumes only for
``CONNECTOR_OPS_HOME``, ``DAGSTER_HOME`` and ``TMPDIR``: the main job, a Push and the loading of the
Definitions (what a code server does first) run there, so
nothing we or our libraries start writes anywhere else (a cache under ``~``, a file beside the package, a
default folder in the working directory).

The file system is made read-only by the kernel, in a mount namespace of the test's own (``unshare
--mount``): every mount read-only, then the two volumes bound writable on top.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.deployment import missing

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
set -e
mount --make-rprivate /
for mount in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  case "$mount" in /proc*|/sys*|/dev*) continue;; esac
  mount -o remount,bind,ro "$mount" 2>/dev/null || true
done
for volume in "$STATE" "$SCRATCH"; do mount --bind "$volume" "$volume"; mount -o remount,bind,rw "$volume"; done
if touch "$PROBE" 2>/dev/null; then echo "the root file system is still writable" >&2; exit 99; fi
cd "$WORKDIR"
exec "$@"
"""


def in_read_only_root(tmp_path: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """``argv`` in a mount namespace where only ``tmp_path/state`` and ``tmp_path/tmp`` can be written."""
    if shutil.which("unshare") is None:
        missing("unshare (util-linux) is not installed")
    state, scratch, workdir = tmp_path / "state", tmp_path / "tmp", tmp_path / "workdir"
    for folder in (state, scratch, workdir):
        folder.mkdir()
    environ = {**os.environ, "HOME": "/nonexistent", "TMPDIR": str(scratch), "CONNECTOR_OPS_HOME": str(state / "home"),
               "STATE": str(state), "SCRATCH": str(scratch), "WORKDIR": str(workdir),
               "PROBE": str(workdir / "probe"), **env}
    environ.pop("DAGSTER_HOME", None)
    result = subprocess.run(["unshare", "--mount", "sh", "-c", SCRIPT, "sh", *argv], env=environ, cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    if result.returncode == 99 or "unshare:" in result.stderr:
        missing(f"no read-only mount namespace could be made: {result.stderr.strip()}")
    return result


def test_the_main_job_a_push_and_the_definitions_run_on_a_read_only_root(tmp_path: Path) -> None:
    data = tmp_path / "state" / "data.csv"
    steps = " && ".join([
        f"{BIN}/connector-ops pipeline run sales_report",
        f"mkdir -p {data.parent} && printf 'id,name\\n1,Ada\\n2,Grace\\n' > {data}",
        f'{BIN}/connector-ops invoke --no-progress etl.push '
        f'"{{\\"platformFile\\": $({BIN}/connector-ops files add {data})}}"',
        # a deployment's DAGSTER_HOME (unset, Dagster's CLI makes a temporary one in the working directory)
        f"mkdir -p {tmp_path}/state/dagster && DAGSTER_HOME={tmp_path}/state/dagster "
        f"{BIN}/dagster definitions validate -m connector_ops.pipelines",
    ])
    result = in_read_only_root(tmp_path, ["sh", "-c", steps])
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "send: message written to" in result.stdout
    assert '"virtualFileId"' in result.stdout
    assert "All code locations passed validation" in result.stderr + result.stdout


def test_a_home_left_unset_on_a_read_only_root_is_one_clear_error(tmp_path: Path) -> None:
    """The default home (``./.connector_ops`` of a read-only working directory) is named, not a traceback."""
    result = in_read_only_root(tmp_path, ["sh", "-c", "unset CONNECTOR_OPS_HOME; "
                                          f"exec {BIN}/connector-ops pipeline run sales_report"])
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "CONNECTOR_OPS_HOME" in result.stderr and "Read-only file system" in result.stderr, result.stderr[-2000:]
