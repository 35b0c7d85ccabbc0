"""The load-time check that a cupy linear keeps a row's bits whatever its slot and its
neighbours (CupyOps.prepare_linear): the backend refuses to run where it does not."""

from __future__ import annotations

from typing import Any

import cupy as cp

from engine.errors import EngineFailure

F32 = cp.float32


def probe_linear(ops: Any, w: Any) -> None:
    """Refuse to run if a row's bits through `ops.linear` change with its slot or its
    neighbours, at the backend's row tile."""
    t = ops.row_tile
    rs = cp.random.RandomState(w.k * 7919 + w.n)
    row = rs.standard_normal((1, w.k), dtype=F32)
    alone = ops.linear(row, w)
    # (slot, rows): the second slot and the last of one tile, one past the second tile's
    # first, the first of three tiles (at tile 1: the rows as many, the slots in range)
    for pos, rows in ((min(1, t - 1), t), (t - 1, t), (t + 2, max(2 * t + 1, t + 3)), (0, 3 * t)):
        x = rs.standard_normal((rows, w.k), dtype=F32)
        x[pos] = row[0]
        if not bool(cp.array_equal(ops.linear(x, w)[pos : pos + 1], alone)):
            raise EngineFailure(
                f"cupy backend: cuBLAS is not row-invariant at tile {t} for a "
                f"{w.k}x{w.n} weight; exactness cannot be guaranteed on this GPU"
            )
