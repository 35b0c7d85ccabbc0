"""numpy backend. Batch-invariant by construction:

* linear layers run on tiles of `row_tile` rows (the last tile zero-padded), all through one
  stacked matmul of a fixed (row_tile, K, N) shape. On OpenBLAS a row's bits depend on its
  position inside a tile for tiles of 16 or more rows; tiles of 8 are position- and
  neighbour-invariant. `probe_linear` checks this for every weight shape at load time.
* attention reduces over fixed blocks of `key_block` keys at absolute positions; block
  sums are merged left to right; masked keys contribute exact zeros.
* norms and softmax reduce within one row along a contiguous axis.
"""

from __future__ import annotations

import numpy as np

from engine.errors import EngineFailure

F32 = np.float32


class NumpyOps:
    name = "numpy"

    def __init__(self, row_tile: int = 8, key_block: int = 64) -> None:
        self.row_tile = row_tile
        self.key_block = key_block
        self._probed: set[tuple[int, int]] = set()
        self._probed_rows: set[tuple[int, int]] = set()

    def asarray(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=F32)

    def to_numpy(self, a: np.ndarray) -> np.ndarray:
        return a

    def prepare_linear(self, w_out_in: np.ndarray) -> np.ndarray:
        w = np.ascontiguousarray(np.asarray(w_out_in, dtype=F32).T)
        self.probe_linear(w.shape[0], w.shape[1])
        return w

    def _tiles(self, x: np.ndarray) -> tuple[np.ndarray, int]:
        m = x.shape[0]
        t = self.row_tile
        padded = -(-m // t) * t
        if padded != m:
            xp = np.zeros((padded,) + x.shape[1:], dtype=F32)
            xp[:m] = x
            x = xp
        return np.ascontiguousarray(x).reshape((padded // t, t) + x.shape[1:]), m

    def linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        tiles, m = self._tiles(x)
        return np.matmul(tiles, w).reshape(-1, w.shape[1])[:m]

    def probe_linear(self, k: int, n: int) -> None:
        """Refuse to run if this BLAS gives a row other bits at another tile position."""
        if (k, n) in self._probed:
            return
        rng = np.random.default_rng(k * 7919 + n)
        w = rng.standard_normal((k, n)).astype(F32)
        row = rng.standard_normal(k).astype(F32)
        alone = self.linear(row[None, :], w)[0]
        for pos in range(1, 2 * self.row_tile + 1):  # every in-tile position, twice
            x = rng.standard_normal((2 * self.row_tile + 1, k)).astype(F32)
            x[pos] = row
            if not np.array_equal(self.linear(x, w)[pos], alone):
                raise EngineFailure(
                    f"numpy backend: BLAS is not row-invariant at tile {self.row_tile} for "
                    f"shape ({k}, {n}); exactness cannot be guaranteed on this machine"
                )
        self._probed.add((k, n))

    def expert_linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        """One (1, K) @ (K, N) product per row, stacked in one call: each row is computed
        alone, so its bits cannot follow the row count. For an expert that got one or two
        rows this is ~6x cheaper than a padded 8-row tile, and about as cheap per row for
        full tiles (measured on OpenBLAS here); dense linears keep their tiles."""
        self.probe_expert_linear(w)
        return self._row_products(x, w)

    def _row_products(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.matmul(np.ascontiguousarray(x, dtype=F32)[:, None, :], w)[:, 0]

    def probe_expert_linear(self, w: np.ndarray) -> None:
        """Refuse to run if a stacked 1-row product gives a row other bits in a stack."""
        k, n = w.shape
        if (k, n) in self._probed_rows:
            return
        rng = np.random.default_rng(k * 104729 + n)
        row = rng.standard_normal(k).astype(F32)
        alone = self._row_products(row[None, :], w)[0]
        for m in (2, 9, 33, 300):
            x = rng.standard_normal((m, k)).astype(F32)
            x[m // 2] = row
            if not np.array_equal(self._row_products(x, w)[m // 2], alone):
                raise EngineFailure(
                    f"numpy backend: stacked row products are not row-invariant for shape "
                    f"({k}, {n}); exactness cannot be guaranteed on this machine"
                )
        self._probed_rows.add((k, n))

    def embed(self, table: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return table[np.asarray(ids, dtype=np.int64)]

    def rms_norm(self, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=F32)
        var = np.mean(np.square(x), axis=-1, keepdims=True, dtype=F32)
        return (x * (F32(1.0) / np.sqrt(var + F32(eps)))) * w

    def rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x [n, heads, D]; cos/sin [n, D/2] for the rows' absolute positions (HF rotate_half)."""
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        c, s = cos[:, None, :], sin[:, None, :]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)

    def silu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return (gate / (F32(1.0) + np.exp(-gate))) * up

    def add(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return a + b

    def concat_rows(self, parts: list[np.ndarray]) -> np.ndarray:
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def concat_cols(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts, axis=1)

    def take_rows(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return x[rows]

    def attention_many(self, items: list[tuple]) -> list[np.ndarray]:
        """One call per stream: padding streams to a common shape measured ~4x slower."""
        return [self.attention(*item) for item in items]

    def scale_rows(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x * np.asarray(w, dtype=F32)[:, None]

    def moe_ffn(self, x: np.ndarray, moe: object) -> np.ndarray:
        from engine.ops.moe import moe_ffn

        return moe_ffn(self, x, moe)

    def add_rms_norm(self, *sum_and_norm: object) -> None:
        return None  # not fused: the forward adds, then norms

    def linear_silu(self, *x_gate_up: object) -> None:
        return None  # not fused: linear, then silu_mul

    def qk_norm_rope(self, *qkv_heads_norms_rope: object) -> None:
        return None  # not fused: the forward norms and ropes q and k op by op

    def qk_norm_rope_store(self, *qkv_heads_norms_rope_target: object) -> None:
        return None  # not fused: the forward norms, ropes, then stores

    def embed_norm_concat(self, *table_ids_hidden_norms: object) -> None:
        return None  # not fused: embed, two norms, a concatenation

    graph_rows = 0  # no captured steps: the forward runs op by op

    def run_graph(self, *owner_key_inputs_body: object) -> None:
        return None

    def moe_in_graph(self, moe: object) -> bool:
        return False

    def new_kv(self, *shape_and_kind: object, **kw: object) -> object:
        from engine.ops.host_kv import HostKV

        return HostKV(self, *shape_and_kind, **kw)

    def new_lanes(self, layers: int, lanes: int, rows: int, kv_heads: int, head_dim: int) -> object:
        from engine.ops.numpy_lanes import NumpyLanes

        return NumpyLanes(self, layers, lanes, rows, kv_heads, head_dim)

    def attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray
    ) -> np.ndarray:
        """Causal attention of q [n, Hq, D] at absolute positions q_pos over k, v [L, Hkv, D].

        Keys are padded to whole blocks; a query sees keys at positions <= its own.
        """
        length, hkv, d = k.shape
        b = self.key_block
        nb = -(-length // b)
        kp = np.zeros((nb * b, hkv, d), dtype=F32)
        vp = np.zeros((nb * b, hkv, d), dtype=F32)
        kp[:length] = k
        vp[:length] = v
        kb = np.ascontiguousarray(kp.reshape(nb, b, hkv, d).transpose(2, 0, 3, 1))
        vb = np.ascontiguousarray(vp.reshape(nb, b, hkv, d).transpose(2, 0, 1, 3))
        return self.attention_blocks(q, kb, vb, q_pos)

    def attention_blocks(
        self, q: np.ndarray, kb: np.ndarray, vb: np.ndarray, q_pos: np.ndarray
    ) -> np.ndarray:
        """Attention over keys already laid out in blocks: kb [Hkv, nb, D, b], vb [Hkv, nb, b, D]
        (each block's matrix contiguous; the block axis may be a view of a longer buffer).
        Keys past a query's position are masked, whatever bytes they hold."""
        return self.attention_lanes(q[None], kb[None], vb[None], np.asarray(q_pos)[None])[0]

    def attention_lanes(
        self, q: np.ndarray, kb: np.ndarray, vb: np.ndarray, q_pos: np.ndarray
    ) -> np.ndarray:
        """`attention_blocks` for L lanes at once: q [L, n, Hq, D], kb [L, Hkv, nb, D, b],
        vb [L, Hkv, nb, b, D], q_pos [L, n] (-1: a padding row that sees nothing). Each
        lane's rows get the bits they get alone: the same (t, D) @ (D, b) product per query
        tile and block, and blocks past a row's position add exact zeros."""
        lanes, n, hq, d = q.shape
        _, hkv, nb, _, b = kb.shape
        group = hq // hkv
        scale = F32(1.0 / np.sqrt(d))
        # rows ordered (token, head-in-group) for each kv head: [L, hkv, n*group, d]
        qh = (q * scale).reshape(lanes, n, hkv, group, d).transpose(0, 2, 1, 3, 4)
        rows = n * group
        t = self.row_tile
        nt = -(-rows // t)
        qt = np.zeros((lanes, hkv, nt * t, d), dtype=F32)
        qt[:, :, :rows] = qh.reshape(lanes, hkv, rows, d)
        qt = qt.reshape(lanes, hkv, nt, 1, t, d)
        # scores [L, hkv, nt, nb, t, b]: one fixed-shape (t, d) @ (d, b) product per tile, block
        s = np.matmul(qt, kb[:, :, None])
        key_pos = np.arange(nb * b).reshape(nb, b)
        row_pos = np.repeat(np.asarray(q_pos), group, axis=1)
        row_pos = np.concatenate([row_pos, np.full((lanes, nt * t - rows), -1)], axis=1)
        row_pos = row_pos.reshape(lanes, 1, nt, 1, t, 1)
        visible = key_pos[None, None, None, :, None, :] <= row_pos  # [L, 1, nt, nb, t, b]
        s = np.where(visible, s, -np.inf).astype(F32)
        m = s.max(axis=(3, 5), keepdims=True)
        m = np.where(np.isfinite(m), m, F32(0.0))
        p = np.exp(s - m)
        p = np.ascontiguousarray(p)
        block_sums = p.sum(axis=-1)  # [L, hkv, nt, nb, t], fixed length b
        pv = np.matmul(p, vb[:, :, None])  # [L, hkv, nt, nb, t, d]
        total = block_sums[:, :, :, 0].copy()
        acc = pv[:, :, :, 0].copy()
        for j in range(1, nb):
            total += block_sums[:, :, :, j]
            acc += pv[:, :, :, j]
        total = np.where(total > 0, total, F32(1.0))
        out = (acc / total[..., None]).reshape(lanes, hkv, nt * t, d)[:, :, :rows]
        out = out.reshape(lanes, hkv, n, group, d).transpose(0, 2, 1, 3, 4)
        return np.ascontiguousarray(out.reshape(lanes, n, hq, d), dtype=F32)
