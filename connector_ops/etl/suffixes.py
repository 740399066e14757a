"""How Push and Pull read a file's name for its format and its packing (``rows.json``, ``report.csv.gz``):
one rule for both, so a name Pull compresses by is one Push reads as compressed data of that format.

A suffix is read case-insensitively and without the spaces around the name: a name pasted with a trailing
space (``report.csv.gz ``) still asks for gzip, where Pull once wrote it uncompressed under that name.
"""

from __future__ import annotations


def ends_with(name: str, suffixes: str | tuple[str, ...]) -> bool:
    """Whether ``name`` ends in one of ``suffixes`` (lower case, with their dot)."""
    return name.strip().lower().endswith(suffixes)


def without(name: str, suffix: str) -> str:
    """``name`` without ``suffix`` and the spaces around it when it ends so (``R.CSV.GZ `` → ``R.CSV``), else
    ``name`` as it is."""
    plain = name.strip()
    return plain[:-len(suffix)] if ends_with(plain, suffix) else name
