"""The container's limits as :mod:`connector_ops.kernel.container` reads them: from real cgroups the tests
make (the CPU quota and memory limit of a parent, which bind its children), and from v2 trees written as
the kernel writes them (this machine mounts its controllers as v1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from connector_ops.kernel.container import Limits, limits, usable_cpus
from tests.cgroups import cgroup, command_in
from tests.deployment import missing

MiB = 1 << 20
PROBE = ("import json; from connector_ops.kernel.container import limits, usable_cpus; "
         "l = limits(); print(json.dumps([l.cpus, l.memory, usable_cpus()]))")


def probe(folders: list[Path]) -> list:
    """What a process started inside ``folders`` reads of its limits: ``[cpus, memory, usable_cpus]``."""
    out = subprocess.run(command_in(folders, [sys.executable, "-c", PROBE]), capture_output=True, text=True,
                         timeout=60, check=True)
    return json.loads(out.stdout)


def test_a_parents_limits_bind_the_process_in_its_child_cgroup() -> None:
    with cgroup("memory", {"memory.limit_in_bytes": 256 * MiB}) as memory_parent, \
            cgroup("memory", {"memory.limit_in_bytes": 512 * MiB}, parent=memory_parent) as memory_child, \
            cgroup("cpu", {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 50_000}) as cpu_parent, \
            cgroup("cpu", {}, parent=cpu_parent) as cpu_child:
        cpus, memory, usable = probe([memory_child, cpu_child])
    assert (cpus, memory, usable) == (0.5, 256 * MiB, 1)


def test_a_quota_of_one_and_a_half_cpus_keeps_two_busy() -> None:
    with cgroup("cpu", {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": 150_000}) as cpu:
        cpus, _, usable = probe([cpu])
    assert cpus == 1.5
    assert usable == min(2, len(os.sched_getaffinity(0)))


def test_a_process_outside_any_limit_has_none() -> None:
    with cgroup("memory", {}) as memory, cgroup("cpu", {}) as cpu:
        assert probe([memory, cpu])[:2] == [None, None]


def write_tree(tmp: Path, membership: str, mount_root: str, files: dict[str, str]) -> Path:
    """A ``/proc/<pid>`` and a cgroup v2 mount under ``tmp``, as the kernel writes them."""
    mount = tmp / "sys fs" / "cgroup"
    proc = tmp / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(f"0::{membership}\n")
    escaped = str(mount).replace(" ", "\\040")
    (proc / "mountinfo").write_text(
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
        f"35 22 0:30 {mount_root} {escaped} rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
        "rw,nsdelegate,memory_recursiveprot\n")
    for name, text in files.items():
        (mount / name).parent.mkdir(parents=True, exist_ok=True)
        (mount / name).write_text(text + "\n")
    return proc


def test_cgroup_v2_the_smallest_limit_up_the_tree(tmp_path: Path) -> None:
    proc = write_tree(tmp_path, "/kubepods/pod1/ctr", "/", {
        "cpu.max": "max 100000",  # the root's (not written by a real kernel, nor read above the mount)
        "kubepods/pod1/cpu.max": "250000 100000",
        "kubepods/pod1/ctr/cpu.max": "max 100000",
        "kubepods/pod1/memory.max": str(512 * MiB),
        "kubepods/pod1/ctr/memory.max": "max",
        "kubepods/memory.max": str(2048 * MiB),
    })
    assert limits(proc) == Limits(cpus=2.5, memory=512 * MiB)


def test_cgroup_v2_a_namespace_sees_only_its_own_folder(tmp_path: Path) -> None:
    # a container with its own cgroup namespace: its cgroup is "/" and the mount's root is its folder
    proc = write_tree(tmp_path, "/", "/", {"cpu.max": "200000 100000", "memory.max": str(300 * MiB)})
    assert limits(proc) == Limits(cpus=2.0, memory=300 * MiB)


def test_cgroup_v2_a_mount_of_a_sub_tree(tmp_path: Path) -> None:
    # the mount shows /kubepods/pod1 as its root: nothing above it is read
    proc = write_tree(tmp_path, "/kubepods/pod1/ctr", "/kubepods/pod1", {
        "ctr/cpu.max": "50000 100000", "cpu.max": "400000 100000", "memory.max": "max"})
    assert limits(proc) == Limits(cpus=0.5, memory=None)


@pytest.mark.parametrize(("cpu", "memory"), [("", ""), ("garbage", "garbage"), ("max", "max"),
                                               ("-1 100000", "-1"), ("100000 0", "0"), ("100000", "1.5G")])
def test_unreadable_or_odd_files_mean_no_limit(tmp_path: Path, cpu: str, memory: str) -> None:
    proc = write_tree(tmp_path, "/a", "/", {"a/cpu.max": cpu, "a/memory.max": memory})
    assert limits(proc) == Limits()


def test_without_cgroup_files_there_are_no_limits(tmp_path: Path) -> None:
    assert limits(tmp_path) == Limits()
    assert usable_cpus(tmp_path) >= 1


SHARE = ("import json, os, sys; from connector_ops.kernel.container import cpu_share; "
         "os.sched_setaffinity(0, set(json.loads(sys.argv[1])) or os.sched_getaffinity(0)); "
         "s = cpu_share(); print(json.dumps([s.count, s.reason]))")


@pytest.mark.parametrize(("quota", "affinity", "expected"), [
    (50_000, [], [1, "the container's CPU quota is 0.5 CPU"]),
    (-1, [0], [1, f"this process may run on 1 of the host's {os.cpu_count()} CPUs"]),
    (-1, [], [os.cpu_count(), None]),  # nothing to say: the host's own count
])
def test_the_share_of_the_cpus_says_what_holds_it_below_the_hosts(quota: int, affinity: list[int],
                                                                  expected: list) -> None:
    if (os.cpu_count() or 1) < 2 or len(os.sched_getaffinity(0)) < (os.cpu_count() or 1):
        missing("needs a process that may run on every CPU of a host of 2 or more")
    with cgroup("cpu", {"cpu.cfs_period_us": 100_000, "cpu.cfs_quota_us": quota}) as cpu:
        out = subprocess.run(command_in([cpu], [sys.executable, "-c", SHARE, json.dumps(affinity)]),
                             capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == expected
