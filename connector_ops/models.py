"""Output models several connectors share (the platform-file descriptor itself is in the kernel)."""

from __future__ import annotations

from typing import Annotated

from connector_ops.kernel.platform_file import REFERABLE, PlatformFile, SpecModel


class PlatformFileOutput(SpecModel):
    """``{platformFile}``: the output of every action that makes a platform file (Pull, Download File)."""

    platform_file: Annotated[PlatformFile, REFERABLE]


class EmptyOutput(SpecModel):
    """The ``{}`` output (e.g. Send Transactional Message)."""
