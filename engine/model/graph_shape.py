"""The fixed shapes of a step run as a captured graph (qwen3.graph_step).

A graph is captured per shape, so shapes are few: a step's rows round up to the row tile,
and past 8 tiles to a power of two of tiles (a long prompt step pays at most twice its
rows, padded rows touching no stream's pages, in place of a graph per tile count). The
rows whose logits are asked for are gathered and padded to a tile with row 0.
"""

from __future__ import annotations

import numpy as np

SMALL_TILES = 8  # up to this many tiles, every tile count has its own graph


def step_rows(total: int, tile: int, limit: int) -> int | None:
    """The rows a step of `total` rows runs at as a graph, or None past `limit` (or where
    the backend runs no graphs: limit 0)."""
    if not limit or total < 0:
        return None
    tiles = max(1, -(-total // tile))
    if tiles > SMALL_TILES:
        tiles = 1 << (tiles - 1).bit_length()
    rows = tiles * tile
    return rows if rows <= max(tile, limit) else None


def padded_rows(rows: np.ndarray, tile: int) -> np.ndarray:
    """`rows` (int64) padded with row 0 to a whole number of tiles (at least one)."""
    out = np.zeros(max(1, -(-len(rows) // tile)) * tile, dtype=np.int64)
    out[: len(rows)] = rows
    return out
