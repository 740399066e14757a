"""A process in which the kernel refuses calls, as a file system refuses them: for the tests of what
connector-ops does on file systems that will not change a file's mode (CIFS without Unix extensions, many FUSE
file systems answer ``chmod`` with EPERM).

Mounting such a file system takes a server or an image; a seccomp filter gets the same answer from the kernel
for the same calls, in a forked child (:func:`tests.other_user.in_child`) so that the test's process keeps
them. Linux on x86-64 and arm64, as the suite runs."""

from __future__ import annotations

import ctypes
import errno
import platform

#: the architecture's audit number (``AUDIT_ARCH_*``) and its calls that change a file's mode: fchmod, fchmodat,
#: fchmodat2 (and chmod, which arm64 does not have)
_MODE_CALLS = {"x86_64": (0xC000003E, (90, 91, 268, 452)), "aarch64": (0xC00000B7, (52, 53, 452))}

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def refuse_mode_changes(code: int = errno.EPERM) -> None:
    """From now on, every call of this process (its one thread) that changes a file's mode fails with ``code``."""
    arch, calls = _MODE_CALLS[platform.machine()]
    n = len(calls)
    program = [_Filter(_LD_W_ABS, 0, 0, 4),  # seccomp_data.arch
               _Filter(_JEQ_K, 1, 0, arch),
               _Filter(_RET_K, 0, 0, _RET_ALLOW),  # another ABI: left alone
               _Filter(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
               *(_Filter(_JEQ_K, n - i, 0, nr) for i, nr in enumerate(calls)),  # to the refusal, past the rest
               _Filter(_RET_K, 0, 0, _RET_ALLOW),
               _Filter(_RET_K, 0, 0, _RET_ERRNO | code)]
    filters = (_Filter * len(program))(*program)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(
            _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(_Program(len(program), filters)), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
