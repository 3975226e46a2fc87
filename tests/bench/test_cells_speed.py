"""``bench.cells_speed`` end to end, tiny: two private Redis cells, a worker per cell."""

from __future__ import annotations

from bench.cells_speed import measure, render


def test_two_cells_share_the_calls_and_each_redis_is_measured() -> None:
    row = measure(2, runs=20, calls=3, threads=2, workers=1, concurrency=1, pool="threads")
    assert row["cells"] == 2 and row["calls"] == 60 and row["calls_per_s"] > 0
    cells = row["per_cell"]
    assert sum(c["calls"] for c in cells) == 60
    # 20 random run ids (all in one cell: p = 2^-19): both cells hold runs, and each
    # cell's Redis did work for them.
    assert all(c["runs"] > 0 and c["redis_cpu_s"] > 0 for c in cells), cells
    assert "cell 1:" in render([row])
