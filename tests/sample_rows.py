"""The files the memory tests and the benchmarks push: the benchmarks' sample of 8 short string columns, and
wide rows (8 columns, ≈ ``width`` bytes a row, each value led by random digits, so that no page compresses
to nothing and no two rows are alike)."""

from __future__ import annotations

import csv
import random
from pathlib import Path

CITIES = [f"City-{i:04d}" for i in range(1000)]
CATEGORIES = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
COLUMNS = ["id", "name", "city", "email", "amount", "date", "category", "note"]
WIDE_COLUMNS = ("id", "a", "b", "c", "d", "e", "f", "g")


def write_sample_csv(path: Path, rows: int) -> Path:
    """``rows`` rows of :data:`COLUMNS` at ``path``, the same for the same ``rows`` (seeded by it): names,
    cities and categories repeat, a tenth of the notes are quoted (they hold the delimiter)."""
    rnd = random.Random(rows)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for i in range(rows):
            writer.writerow([
                i, f"name-{rnd.randrange(10**6)}", rnd.choice(CITIES), f"user{i}@example.com",
                f"{rnd.uniform(0, 1000):.2f}", f"2026-{rnd.randint(1, 12):02d}-{rnd.randint(1, 28):02d}",
                rnd.choice(CATEGORIES), "quoted, note" if i % 10 == 0 else "plain",
            ])
    return path


def write_wide_csv(path: Path, rows: int, width: int = 1024, seed: int = 7) -> Path:
    """``rows`` rows of ``id`` and seven values of ``width // 7`` characters, as CSV at ``path``."""
    rnd = random.Random(seed)
    pad = "x" * (width // 7 - 10)
    with path.open("w", encoding="utf-8") as handle:
        handle.write(",".join(WIDE_COLUMNS) + "\n")
        for i in range(rows):
            handle.write(f"{i}," + ",".join(f"{rnd.randrange(10**9):09d}{pad}" for _ in range(7)) + "\n")
    return path
