"""Float32 K/V rows per lane and layer, kept in the attention's block layout (K as
[Hkv, blocks, D, b], V as [Hkv, blocks, b, D]) so attention reads a view of a lane's
first blocks instead of gathering its history. Rows past a query's position are masked,
whatever they hold, so a lane needs no clearing between streams: only rows a stream will
read before writing them (see `zero`) must be set."""

from __future__ import annotations

from typing import Any

import numpy as np

F32 = np.float32


class NumpyLanes:
    def __init__(
        self, ops: Any, layers: int, lanes: int, rows: int, kv_heads: int, head_dim: int
    ) -> None:
        self.ops = ops
        b = ops.key_block
        self.rows = max(1, -(-rows // b)) * b
        blocks = self.rows // b
        self.k = [self._zeros((lanes, kv_heads, blocks, head_dim, b)) for _ in range(layers)]
        self.v = [self._zeros((lanes, kv_heads, blocks, b, head_dim)) for _ in range(layers)]

    def _zeros(self, shape: tuple[int, ...]) -> Any:
        return np.zeros(shape, F32)

    @property
    def bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.k + self.v)

    def put(self, layer: int, lane: int, start: int, k: Any, v: Any) -> None:
        """Rows k, v [n, Hkv, D] (numpy or the backend's arrays) at positions start.."""
        k, v = self.ops.to_numpy(k), self.ops.to_numpy(v)
        b = self.ops.key_block
        pos = np.arange(start, start + len(k))
        blk, off = pos // b, pos % b
        self.k[layer][lane][:, blk, :, off] = k  # advanced axes first: [n, Hkv, D]
        self.v[layer][lane][:, blk, off, :] = v.transpose(1, 0, 2)

    def zero(self, lane: int, rows: int) -> None:
        """Rows 0..rows-1 of every layer of `lane` become zeros (rows a stream reads as
        zeros without writing them, as a drafter's rows for a reused prefix)."""
        if rows <= 0:
            return
        shape = self.k[0].shape
        z = np.zeros((rows, shape[1], shape[3]), F32)
        for layer in range(len(self.k)):
            self.put(layer, lane, 0, z, z)

    def blocks(self, layer: int, lane: int, length: int) -> tuple[Any, Any]:
        nb = -(-length // self.ops.key_block)
        return self.k[layer][lane][:, :nb], self.v[layer][lane][:, :nb]

    def attend(self, layer: int, lane: int, q: Any, q_pos: np.ndarray, length: int) -> Any:
        """Attention of q [n, Hq, D] at positions q_pos over the lane's rows 0..length-1."""
        kb, vb = self.blocks(layer, lane, length)
        return self.ops.attention_blocks(q, kb, vb, q_pos)

    def attend_many(self, layer: int, items: list[tuple[int, Any, np.ndarray, int]]) -> list[Any]:
        """`attend` for several (lane, q, q_pos, length) at once. Lanes that lie close
        together run as one batch over a view of their blocks (a lane between them that is
        not asked runs padding rows that see nothing); others one at a time."""
        lanes = [lane for lane, _, _, _ in items]
        lo, hi = min(lanes), max(lanes)
        if len(items) == 1 or len(set(lanes)) < len(lanes) or hi - lo + 1 > 2 * len(items):
            return [self.attend(layer, *item) for item in items]
        b = self.ops.key_block
        n = max(len(q) for _, q, _, _ in items)
        nb = max(-(-length // b) for _, _, _, length in items)
        _, hq, d = items[0][1].shape
        q_all = np.zeros((hi - lo + 1, n, hq, d), F32)
        pos_all = np.full((hi - lo + 1, n), -1, dtype=np.int64)
        for lane, q, q_pos, _ in items:
            q_all[lane - lo, : len(q)] = self.ops.to_numpy(q)
            pos_all[lane - lo, : len(q)] = q_pos
        kb = self.k[layer][lo : hi + 1, :, :nb]
        vb = self.v[layer][lo : hi + 1, :, :nb]
        out = self.ops.attention_lanes(self.ops.asarray(q_all), kb, vb, pos_all)
        return [out[lane - lo, : len(q)] for lane, q, _, _ in items]
