"""Float32 K/V rows per lane and layer on the GPU (the drafters' own context rows).

Each layer holds [lanes * rows, Hkv, D] float32: lane l's position p is slot l * rows + p,
read by the same attention kernel as the KV pages (one "page" of `rows` rows per lane, kind
f32). Rows past a query's position are never read, so a lane needs no clearing between
streams: only rows a stream reads before writing them (see `zero`) must be set. One lane
more than asked is the scratch lane: the padding rows of a fixed-shape step (`fixed_rows`)
write and read only there."""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from engine.ops.base import StoredAttend
from engine.ops.cupy_kv import KVTarget, store_rows


class CupyLanes:
    def __init__(
        self, ops: Any, layers: int, lanes: int, rows: int, kv_heads: int, head_dim: int
    ) -> None:
        self.ops = ops
        self.rows = max(1, rows)
        self.scratch = lanes
        shape = ((lanes + 1) * self.rows, kv_heads, head_dim)
        self.k = [cp.zeros(shape, dtype=cp.float32) for _ in range(layers)]
        self.v = [cp.zeros(shape, dtype=cp.float32) for _ in range(layers)]

    @property
    def bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.k + self.v)

    def put(self, layer: int, lane: int, start: int, k: Any, v: Any) -> None:
        """Rows k, v [n, Hkv, D] (numpy or cupy) at positions start.. of `lane`."""
        a = lane * self.rows + start
        n = len(k)
        self.k[layer][a : a + n] = cp.asarray(k, dtype=cp.float32)
        self.v[layer][a : a + n] = cp.asarray(v, dtype=cp.float32)

    def zero(self, lane: int, rows: int) -> None:
        if rows <= 0:
            return
        a = lane * self.rows
        for layer in range(len(self.k)):
            self.k[layer][a : a + rows] = 0.0
            self.v[layer][a : a + rows] = 0.0

    def attend(self, layer: int, lane: int, q: Any, q_pos: np.ndarray, length: int) -> Any:
        """Attention of q [n, Hq, D] at positions q_pos over the lane's rows 0..length-1."""
        n = q.shape[0]
        last = np.minimum(np.asarray(q_pos, dtype=np.int64), length - 1).astype(np.int32)
        meta = (
            cp.asarray(np.asarray([lane], dtype=np.int32)),
            cp.zeros(n, dtype=cp.int32),
            cp.asarray(last),
            self.rows,
        )
        return self.ops.attend("f32", q, self.k[layer], self.v[layer], None, None, meta)

    def attend_many(self, layer: int, items: list[tuple[int, Any, np.ndarray, int]]) -> list[Any]:
        """`attend` for several (lane, q, q_pos, length) in one launch: every query row gets
        its own lane as its one page and its own last position, so each row is computed
        exactly as alone (the kernel's blocks never look at other rows)."""
        if len(items) == 1:
            return [self.attend(layer, *items[0])]
        counts = [len(q) for _, q, _, _ in items]
        last = np.concatenate(
            [np.minimum(np.asarray(pos, dtype=np.int64), length - 1) for _, _, pos, length in items]
        ).astype(np.int32)
        meta = (
            cp.asarray(np.asarray([lane for lane, _, _, _ in items], dtype=np.int32)),
            cp.asarray(np.repeat(np.arange(len(items), dtype=np.int32), counts)),
            cp.asarray(last),
            self.rows,
        )
        q = cp.concatenate([cp.asarray(q, dtype=cp.float32) for _, q, _, _ in items], axis=0)
        out = self.ops.attend("f32", q, self.k[layer], self.v[layer], None, None, meta)
        bounds = np.cumsum([0, *counts])
        return [out[a:z] for a, z in zip(bounds[:-1], bounds[1:], strict=True)]

    def fixed_rows(
        self, items: list[tuple[int, int, int]], rows: int, causal: bool = True
    ) -> dict[str, np.ndarray] | None:
        """Host arrays that place (lane, start, count) items in a step of exactly `rows` rows
        for `fixed_attend`: each row's slot, its lane as its one page, and its last
        visible position (its own where causal, else its item's last row: a block drafted
        in one pass); padding rows go to the scratch lane. None where the items do not fit."""
        slots = np.full(rows, self.scratch * self.rows, dtype=np.int64)
        ptab = np.full(rows, self.scratch, dtype=np.int32)
        last = np.zeros(rows, dtype=np.int32)
        i = 0
        for lane, start, n in items:
            if not 0 <= lane < self.scratch or start < 0 or start + n > self.rows or i + n > rows:
                return None
            pos = start + np.arange(n)
            slots[i : i + n] = lane * self.rows + pos
            ptab[i : i + n] = lane
            last[i : i + n] = pos if causal else start + n - 1
            i += n
        poff = np.arange(rows, dtype=np.int32)
        return {"lane_slots": slots, "lane_ptab": ptab, "lane_poff": poff, "lane_last": last}

    def fixed_attend(self, layer: int, placed: dict[str, Any]) -> StoredAttend:
        """`put` of the placed rows' k, v [rows, Hkv, D], then their attention (as
        `attend_many` gives it), for rows placed by `fixed_rows` (its arrays on the device);
        the put fusable into the q/k norm launch."""
        kc, vc, slots = self.k[layer], self.v[layer], placed["lane_slots"]
        meta = (placed["lane_ptab"], placed["lane_poff"], placed["lane_last"], self.rows)

        def store(k: Any, v: Any) -> None:
            store_rows(self.ops, k, v, (kc, None), (vc, None), slots, "f32")

        def attend(q: Any) -> Any:
            return self.ops.attend("f32", q, kc, vc, None, None, meta)

        return StoredAttend(KVTarget((kc, None), (vc, None), slots, "f32"), store, attend)
