"""The numpy backend's lane views as mlx arrays, updated in place one key block at a time
(mlx reuses the buffer of an array that nothing else holds)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from engine.ops.numpy_lanes import NumpyLanes


class MlxLanes(NumpyLanes):
    def _zeros(self, shape: tuple[int, ...]) -> mx.array:
        a = mx.zeros(shape, dtype=mx.float32)
        mx.eval(a)
        return a

    def put(self, layer: int, lane: int, start: int, k: Any, v: Any) -> None:
        k, v = self.ops.to_numpy(k), self.ops.to_numpy(v)
        b = self.ops.key_block
        lk, lv = self.k[layer], self.v[layer]
        pos, end = start, start + len(k)
        while pos < end:  # one slice update per key block the rows touch
            j, o = divmod(pos, b)
            n = min(end - pos, b - o)
            rows = slice(pos - start, pos - start + n)
            lk[lane, :, j, :, o : o + n] = mx.array(_rows_last(k[rows]))
            lv[lane, :, j, o : o + n, :] = mx.array(_heads_first(v[rows]))
            pos += n
        mx.eval(lk, lv)

    def blocks(self, layer: int, lane: int, length: int) -> tuple[mx.array, mx.array]:
        nb = -(-length // self.ops.key_block)
        return self.k[layer][lane, :, :nb], self.v[layer][lane, :, :nb]


def _rows_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(1, 2, 0))  # [n, Hkv, D] -> [Hkv, D, n]


def _heads_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(1, 0, 2))  # [n, Hkv, D] -> [Hkv, n, D]
