"""KV memory of the host backends (numpy, mlx): encoded pages on the host, plus each
lane's rows decoded once into the backend's lane views (engine/ops/numpy_lanes.py).

Pages hold the codes (bf16, or fp8 with a power-of-two scale per position and KV head),
the bytes every backend must agree on. A step encodes and decodes only its new rows, and
attention reads a view of the lane's blocks instead of gathering and decoding the whole
history. A decoded row is a function of its codes alone, so a reused prefix decoded from
cached pages at `open_lane` holds the same bits as the rows its first stream decoded
while writing them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.errors import EngineFailure
from engine.kv import codec
from engine.kv.store import KVStore
from engine.ops.base import KVSegment


class HostKV:
    def __init__(
        self,
        ops: Any,
        layers: int,
        pages: int,
        page_rows: int,
        kv_heads: int,
        head_dim: int,
        kind: str,
        lanes: int,
        lane_rows: int,
    ) -> None:
        self.ops = ops
        self.kind = kind
        self.page_rows = page_rows
        self.store = KVStore(layers, pages, page_rows, kv_heads, head_dim, kind)
        self.lanes = ops.new_lanes(layers, lanes, lane_rows, kv_heads, head_dim)

    @property
    def bytes(self) -> int:
        return self.store.bytes

    def open_lane(self, lane: int, pages: list[int], rows: int) -> None:
        """A stream takes `lane` over `pages`; its first `rows` rows are already stored."""
        if rows <= 0:
            return
        for layer in range(len(self.store.k)):
            keys, values = self.store.read(layer, pages, rows)
            self.lanes.put(layer, lane, 0, keys, values)

    def read_codes(
        self, layer: int, pages: list[int], length: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        return self.store.codes(layer, pages, length)

    def store_attend(
        self,
        layer: int,
        segments: list[KVSegment],
        positions: np.ndarray,
        q: Any,
        k: Any,
        v: Any,
    ) -> Any:
        # the codec works row by row, so one call encodes (and decodes) every segment's rows
        codes_k, exp_k = codec.encode(self.kind, self.ops.to_numpy(k))
        codes_v, exp_v = codec.encode(self.kind, self.ops.to_numpy(v))
        plain_k = codec.decode(self.kind, codes_k, exp_k)
        plain_v = codec.decode(self.kind, codes_v, exp_v)
        asks, a = [], 0
        for seg in segments:
            z = a + seg.count
            self.store.put_codes(
                layer,
                seg.pages,
                seg.start,
                codes_k[a:z],
                None if exp_k is None else exp_k[a:z],
                codes_v[a:z],
                None if exp_v is None else exp_v[a:z],
            )
            self.lanes.put(layer, seg.lane, seg.start, plain_k[a:z], plain_v[a:z])
            asks.append((seg.lane, q[a:z], positions[a:z], seg.start + seg.count))
            a = z
        return self.ops.concat_rows(self.lanes.attend_many(layer, asks))

    def fixed_rows(self, segments: list[KVSegment], rows: int) -> None:
        """Host memories have no fixed-shape steps: every step runs through store_attend."""
        return None

    def fixed_attend(self, layer: int, placed: dict) -> Any:
        raise EngineFailure("host KV memory: no fixed-shape steps (fixed_rows gave none)")
