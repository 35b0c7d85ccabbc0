"""KV memory of the mlx backend: the numpy backend's pages and codec, with each lane's
decoded view kept as mlx arrays, updated in place a block at a time, so attention reads
the lane's blocks without converting the history again."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.ops.numpy_kv import NumpyKV


class MlxKV(NumpyKV):
    def _zeros(self, shape: tuple[int, ...]) -> mx.array:
        a = mx.zeros(shape, dtype=mx.float32)
        mx.eval(a)
        return a

    def _blocks(self, layer: int, lane: int, nb: int) -> tuple[mx.array, mx.array]:
        return self.lane_k[layer][lane, :, :nb], self.lane_v[layer][lane, :, :nb]

    def _put(self, layer: int, lane: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        b = self.ops.key_block
        lk, lv = self.lane_k[layer], self.lane_v[layer]
        pos, end = start, start + len(k)
        while pos < end:  # one slice update per key block the rows touch
            j, o = divmod(pos, b)
            n = min(end - pos, b - o)
            rows = slice(pos - start, pos - start + n)
            lk[lane, :, j, :, o : o + n] = mx.array(_rows_last(k[rows]))
            lv[lane, :, j, o : o + n, :] = mx.array(_heads_first(v[rows]))
            pos += n
        mx.eval(lk, lv)


def _rows_last(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(1, 2, 0))  # [n, Hkv, D] -> [Hkv, D, n]


def _heads_first(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(1, 0, 2))  # [n, Hkv, D] -> [Hkv, n, D]
