"""The fixed shapes a step runs at as a captured graph (engine/model/graph_shape.py), on
their edges: one tile, the last small tile count, the first rounded one, the limit."""

from __future__ import annotations

import numpy as np
import pytest

from engine.model.graph_shape import SMALL_TILES, padded_rows, step_rows


@pytest.mark.parametrize(
    "total,want",
    [
        (0, 8), (1, 8), (8, 8), (9, 16), (63, 64), (64, 64),  # every tile count up to 8 tiles
        (65, 128), (100, 128), (128, 128), (129, 256), (256, 256), (257, 512), (512, 512),
        (513, None),  # past the limit: eager
    ],
)  # fmt: skip
def test_rows_round_to_the_tile_then_to_a_power_of_two_of_tiles(
    total: int, want: int | None
) -> None:
    assert step_rows(total, 8, 512) == want


def test_the_limit_and_a_backend_without_graphs() -> None:
    assert step_rows(64, 8, 64) == 64 and step_rows(65, 8, 64) is None
    assert step_rows(1, 8, 0) is None  # numpy and mlx: graph_rows 0
    assert step_rows(3, 16, 4) == 16  # a limit under the tile still takes one tile
    assert step_rows(SMALL_TILES * 4 + 1, 4, 512) == 2 * SMALL_TILES * 4


def test_logit_rows_pad_to_a_tile_with_row_zero() -> None:
    got = padded_rows(np.asarray([5, 9], dtype=np.int64), 8)
    assert got.tolist() == [5, 9, 0, 0, 0, 0, 0, 0] and got.dtype == np.int64
    assert padded_rows(np.asarray([], dtype=np.int64), 8).tolist() == [0] * 8
    assert len(padded_rows(np.arange(9), 8)) == 16 and len(padded_rows(np.arange(8), 8)) == 8
