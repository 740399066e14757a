"""Wide rows for memory tests and the memory-limit benchmark: 8 columns, ≈ ``width`` bytes a row, each value
led by random digits (so no page compresses to nothing and no two rows are alike)."""

from __future__ import annotations

import random
from pathlib import Path

COLUMNS = ("id", "a", "b", "c", "d", "e", "f", "g")


def write_wide_csv(path: Path, rows: int, width: int = 1024, seed: int = 7) -> Path:
    """``rows`` rows of ``id`` and seven values of ``width // 7`` characters, as CSV at ``path``."""
    rnd = random.Random(seed)
    pad = "x" * (width // 7 - 10)
    with path.open("w", encoding="utf-8") as handle:
        handle.write(",".join(COLUMNS) + "\n")
        for i in range(rows):
            handle.write(f"{i}," + ",".join(f"{rnd.randrange(10**9):09d}{pad}" for _ in range(7)) + "\n")
    return path
