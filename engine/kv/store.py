"""Page storage for K and V of every layer. Knows pages and rows, not streams."""

from __future__ import annotations

import numpy as np

from engine.kv import codec


class KVStore:
    def __init__(
        self, layers: int, pages: int, page_rows: int, kv_heads: int, head_dim: int, kind: str
    ) -> None:
        self.kind = kind
        self.page_rows = page_rows
        shape = (pages, page_rows, kv_heads, head_dim)
        dt = codec.code_dtype(kind)
        self.k = [np.zeros(shape, dtype=dt) for _ in range(layers)]
        self.v = [np.zeros(shape, dtype=dt) for _ in range(layers)]
        self.k_exp = self.v_exp = None
        if kind == "fp8":
            self.k_exp = [np.zeros(shape[:3], dtype=np.int8) for _ in range(layers)]
            self.v_exp = [np.zeros(shape[:3], dtype=np.int8) for _ in range(layers)]

    @property
    def bytes(self) -> int:
        total = sum(a.nbytes for a in self.k + self.v)
        if self.k_exp is not None:
            total += sum(a.nbytes for a in self.k_exp + self.v_exp)
        return total

    def _slots(self, pages: list[int], start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        pos = np.arange(start, start + n)
        page_idx = np.asarray(pages, dtype=np.int64)[pos // self.page_rows]
        return page_idx, pos % self.page_rows

    def write(self, layer: int, pages: list[int], start: int, k: np.ndarray, v: np.ndarray) -> None:
        kc, ke = codec.encode(self.kind, k)
        vc, ve = codec.encode(self.kind, v)
        self.put_codes(layer, pages, start, kc, ke, vc, ve)

    def put_codes(
        self,
        layer: int,
        pages: list[int],
        start: int,
        kc: np.ndarray,
        ke: np.ndarray | None,
        vc: np.ndarray,
        ve: np.ndarray | None,
    ) -> None:
        p, r = self._slots(pages, start, len(kc))
        self.k[layer][p, r] = kc
        self.v[layer][p, r] = vc
        if ke is not None:
            self.k_exp[layer][p, r] = ke
            self.v_exp[layer][p, r] = ve

    def read(self, layer: int, pages: list[int], length: int) -> tuple[np.ndarray, np.ndarray]:
        used = -(-length // self.page_rows)
        idx = np.asarray(pages[:used], dtype=np.int64)

        def gather(store: list[np.ndarray], exps: list[np.ndarray] | None) -> np.ndarray:
            codes = store[layer][idx].reshape((-1,) + store[layer].shape[2:])[:length]
            e = None
            if exps is not None:
                e = exps[layer][idx].reshape((-1,) + exps[layer].shape[2:])[:length]
            return codec.decode(self.kind, codes, e)

        return gather(self.k, self.k_exp), gather(self.v, self.v_exp)

    def codes(
        self, layer: int, pages: list[int], length: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """Stored codes and exponents of rows 0..length-1, without decoding."""
        used = -(-length // self.page_rows)
        idx = np.asarray(pages[:used], dtype=np.int64)

        def rows(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx].reshape((-1,) + a.shape[2:])[:length]

        k_exp = None if self.k_exp is None else self.k_exp[layer]
        v_exp = None if self.v_exp is None else self.v_exp[layer]
        return rows(self.k[layer]), rows(k_exp), rows(self.v[layer]), rows(v_exp)
