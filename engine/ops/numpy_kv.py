"""KV memory of the numpy backend: encoded pages on the host, plus a decoded view per lane.

Pages hold the codes (bf16, or fp8 with a power-of-two scale per position and KV head),
the bytes every backend must agree on. Each lane also keeps its stream's rows decoded to
float32 in the attention's block layout (K as [Hkv, blocks, D, b], V as [Hkv, blocks, b, D]),
so a step encodes and decodes only its new rows, and attention reads a view of the lane's
blocks instead of gathering and decoding the whole history. A decoded row is a function of
its codes alone, so a reused prefix decoded from cached pages at `open_lane` holds the same
bits as the rows its first stream decoded while writing them.
"""

from __future__ import annotations

import numpy as np

from engine.kv import codec
from engine.kv.store import KVStore
from engine.ops.base import KVSegment

F32 = np.float32


class NumpyKV:
    def __init__(
        self,
        ops: object,
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
        b = ops.key_block
        blocks = max(1, -(-lane_rows // b))
        self.lane_k = [self._zeros((lanes, kv_heads, blocks, head_dim, b)) for _ in range(layers)]
        self.lane_v = [self._zeros((lanes, kv_heads, blocks, b, head_dim)) for _ in range(layers)]

    def _zeros(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, F32)

    @property
    def bytes(self) -> int:
        return self.store.bytes

    def open_lane(self, lane: int, pages: list[int], rows: int) -> None:
        """A stream takes `lane` over `pages`; its first `rows` rows are already stored."""
        if rows <= 0:
            return
        for layer in range(len(self.lane_k)):
            keys, values = self.store.read(layer, pages, rows)
            self._put(layer, lane, 0, keys, values)

    def read_codes(
        self, layer: int, pages: list[int], length: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        return self.store.codes(layer, pages, length)

    def _blocks(self, layer: int, lane: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
        return self.lane_k[layer][lane][:, :nb], self.lane_v[layer][lane][:, :nb]

    def _put(self, layer: int, lane: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Decoded rows k, v [n, Hkv, D] at positions start.. of the lane's view."""
        b = self.ops.key_block
        pos = np.arange(start, start + len(k))
        blk, off = pos // b, pos % b
        self.lane_k[layer][lane][:, blk, :, off] = k  # advanced axes first: [n, Hkv, D]
        self.lane_v[layer][lane][:, blk, off, :] = v.transpose(1, 0, 2)

    def store_attend(
        self,
        layer: int,
        segments: list[KVSegment],
        positions: np.ndarray,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
    ) -> np.ndarray:
        b = self.ops.key_block
        k, v = self.ops.to_numpy(k), self.ops.to_numpy(v)
        outs, a = [], 0
        for seg in segments:
            z = a + seg.count
            codes_k, exp_k = codec.encode(self.kind, k[a:z])
            codes_v, exp_v = codec.encode(self.kind, v[a:z])
            self.store.put_codes(layer, seg.pages, seg.start, codes_k, exp_k, codes_v, exp_v)
            self._put(
                layer,
                seg.lane,
                seg.start,
                codec.decode(self.kind, codes_k, exp_k),
                codec.decode(self.kind, codes_v, exp_v),
            )
            nb = -(-(seg.start + seg.count) // b)
            kb, vb = self._blocks(layer, seg.lane, nb)
            outs.append(self.ops.attention_blocks(q[a:z], kb, vb, positions[a:z]))
            a = z
        return self.ops.concat_rows(outs)
