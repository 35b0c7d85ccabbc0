"""mlx backend (CPU), float32 throughout. Batch-invariant by construction:

* linear layers are one float32 matmul of the rows against the weight kept as [in, out]
  (the faster layout for mlx's CPU gemm). On the Linux CPU build mlx calls a reference
  BLAS whose sgemm accumulates every output in plain K order, so a row's bits do not depend
  on the row count M, its position or its neighbours (measured on x86-64 Linux with mlx
  0.32.4 for M = 1..33 and up to 512, for every shape of the test and fixture models).
  `probe_matmul` checks this for every weight shape at load time (and for the attention
  shapes at first use) and refuses to run where it does not hold, for example on a build
  linked to a blocked BLAS. With `row_tile > 1` the rows run on zero-padded tiles of that
  many rows instead, like the numpy backend.
* attention reduces over fixed blocks of `key_block` keys at absolute positions; masked
  keys contribute exact zeros; per-block sums are merged left to right.
* norms and softmax reduce within one row along a contiguous axis.
* every op evaluates its result before returning (`mx.eval`), so no lazy graph ever spans
  two ops and the bits of one op never depend on what the caller built around it. mlx
  does not fuse kernels outside `mx.compile`, which this backend never uses; with
  `eval_ops=False` (graphs evaluated only where the model reads numpy) a model gives the
  same bits, which the tests check.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine.errors import EngineFailure

F32 = mx.float32

# row counts tried by the invariance probe: 1 (the single-row path), small, odd, > 32
_PROBE_ROWS = (1, 2, 3, 5, 8, 13, 33)
_PROBE_COLS = 2048


class MlxOps:
    name = "mlx"

    def __init__(
        self, row_tile: int = 1, key_block: int = 64, probe: bool = True, eval_ops: bool = True
    ) -> None:
        self.row_tile = row_tile
        self.eval_ops = eval_ops
        self.key_block = key_block
        self.probe = probe
        self._probed: set[tuple[int, int]] = set()
        self.device = mx.cpu
        mx.set_default_device(self.device)

    def _out(self, a: mx.array) -> mx.array:
        if self.eval_ops:
            mx.eval(a)
        return a

    # ---- conversion -----------------------------------------------------------------
    def asarray(self, a: np.ndarray | mx.array) -> mx.array:
        if isinstance(a, mx.array):
            return a if a.dtype == F32 else self._out(a.astype(F32))
        return mx.array(np.ascontiguousarray(a, dtype=np.float32))

    def to_numpy(self, a: mx.array | np.ndarray) -> np.ndarray:
        if isinstance(a, np.ndarray):
            return a
        return np.array(a, dtype=np.float32, copy=True)

    # ---- linear ---------------------------------------------------------------------
    def prepare_linear(self, w_out_in: np.ndarray) -> mx.array:
        w = np.ascontiguousarray(np.asarray(w_out_in, dtype=np.float32).T)  # [in, out]
        wm = mx.array(w)
        self.probe_matmul(w.shape[0], w.shape[1], wm)
        return wm

    def _matmul_rows(self, x: mx.array, w: mx.array) -> mx.array:
        t = self.row_tile
        m = x.shape[0]
        if t <= 1:
            return x @ w
        padded = -(-m // t) * t
        if padded != m:
            x = mx.concatenate([x, mx.zeros((padded - m, x.shape[1]), dtype=F32)], axis=0)
        out = x.reshape(padded // t, t, x.shape[1]) @ w
        return out.reshape(padded, w.shape[1])[:m]

    def linear(self, x: mx.array, w: mx.array) -> mx.array:
        return self._out(self._matmul_rows(x, w))

    def probe_matmul(self, k: int, n: int, w: mx.array | None = None) -> None:
        """Refuse to run if a row of x @ w [k, n] changes bits with the row count, its
        position or its neighbours. Wide weights are probed on their first
        `_PROBE_COLS` columns (an lm_head of 150k columns would take seconds)."""
        if not self.probe or (k, n) in self._probed:
            return
        rng = np.random.default_rng(k * 7919 + n)
        cols = min(n, _PROBE_COLS)
        if w is None:
            w = mx.array(rng.standard_normal((k, cols)).astype(np.float32))
        elif cols < n:
            w = mx.contiguous(w[:, :cols])
        row = rng.standard_normal(k).astype(np.float32)
        alone = np.array(self._matmul_rows(mx.array(row[None, :]), w))[0]
        for m in _PROBE_ROWS[1:]:
            x = rng.standard_normal((m, k)).astype(np.float32)
            at = sorted({0, m // 2, m - 1})
            x[at] = row
            got = np.array(self._matmul_rows(mx.array(x), w))
            for pos in at:
                if not np.array_equal(got[pos], alone):
                    raise EngineFailure(
                        f"mlx backend: matmul is not row-invariant for shape ({k}, {n}) "
                        f"(row {pos} of {m}, row_tile {self.row_tile}); exactness cannot be "
                        "guaranteed with this mlx build"
                    )
        self._probed.add((k, n))

    # ---- elementwise and row ops ----------------------------------------------------
    def embed(self, table: mx.array, ids: np.ndarray) -> mx.array:
        return self._out(mx.take(table, mx.array(np.asarray(ids, dtype=np.int32)), axis=0))

    def rms_norm(self, x: mx.array, w: mx.array, eps: float) -> mx.array:
        var = mx.mean(mx.square(x), axis=-1, keepdims=True)
        return self._out((x * (1.0 / mx.sqrt(var + eps))) * w)

    def rope(self, x: mx.array, cos: mx.array | np.ndarray, sin: mx.array | np.ndarray) -> mx.array:
        """x [n, heads, D]; cos/sin [n, D/2] for the rows' absolute positions (HF rotate_half)."""
        half = x.shape[-1] // 2
        c = self.asarray(cos)[:, None, :]
        s = self.asarray(sin)[:, None, :]
        x1, x2 = x[..., :half], x[..., half:]
        return self._out(mx.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1))

    def silu_mul(self, gate: mx.array, up: mx.array) -> mx.array:
        return self._out((gate / (1.0 + mx.exp(-gate))) * up)

    def add(self, a: mx.array, b: mx.array) -> mx.array:
        return self._out(a + b)

    def concat_rows(self, parts: list[mx.array]) -> mx.array:
        return parts[0] if len(parts) == 1 else self._out(mx.concatenate(parts, axis=0))

    def concat_cols(self, parts: list[mx.array]) -> mx.array:
        return self._out(mx.concatenate(parts, axis=1))

    def take_rows(self, x: mx.array, rows: np.ndarray) -> mx.array:
        return self._out(mx.take(x, mx.array(np.asarray(rows, dtype=np.int32)), axis=0))

    # ---- memory and attention -------------------------------------------------------
    def expert_linear(self, x: object, w: object) -> object:
        return self.linear(x, w)  # already row-invariant at any row count

    def scale_rows(self, x: mx.array, w: np.ndarray) -> mx.array:
        return self._out(x * mx.array(np.asarray(w, dtype=np.float32))[:, None])

    def moe_ffn(self, x: mx.array, moe: object) -> mx.array:
        """Built as one lazy graph and evaluated once (the router logits are read on the
        way): on a loaded CPU each mx.eval costs a thread hand-off, and the block holds
        four ops per expert. Its bits equal the op-by-op ones (test_moe_block compares it
        with a per-row reference that evaluates every op)."""
        from engine.ops.moe import moe_ffn

        keep, self.eval_ops = self.eval_ops, False
        try:
            out = moe_ffn(self, x, moe)
        finally:
            self.eval_ops = keep
        return self._out(out)

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
        from engine.ops.mlx_lanes import MlxLanes

        return MlxLanes(self, layers, lanes, rows, kv_heads, head_dim)

    def attention_many(self, items: list[tuple]) -> list[mx.array]:
        return [self.attention(*item) for item in items]

    def attention(
        self,
        q: mx.array,
        k: mx.array | np.ndarray,
        v: mx.array | np.ndarray,
        q_pos: np.ndarray,
    ) -> mx.array:
        """Causal attention of q [n, Hq, D] at absolute positions q_pos over k, v [L, Hkv, D].

        Keys are padded with zeros to whole blocks of `key_block`; a query sees keys at
        positions <= its own. Scores and P·V are fixed-shape products per block; the softmax
        max is taken over all visible keys (exact in any order); block sums and block P·V
        are merged left to right, so keys past a query, and blocks past the last one it
        sees, add exact zeros whatever the key length.
        """
        k, v = self.asarray(k), self.asarray(v)
        length, hkv, d = k.shape
        b = self.key_block
        nb = -(-length // b)
        if nb * b != length:
            k = mx.pad(k, [(0, nb * b - length), (0, 0), (0, 0)])
            v = mx.pad(v, [(0, nb * b - length), (0, 0), (0, 0)])
        kb = mx.contiguous(k.reshape(nb, b, hkv, d).transpose(2, 0, 3, 1))  # [hkv, nb, d, b]
        vb = mx.contiguous(v.reshape(nb, b, hkv, d).transpose(2, 0, 1, 3))  # [hkv, nb, b, d]
        return self.attention_blocks(q, kb, vb, q_pos)

    def attention_blocks(
        self, q: mx.array, kb: mx.array, vb: mx.array, q_pos: np.ndarray
    ) -> mx.array:
        """Attention over keys laid out in blocks, kb [Hkv, nb, D, b] and vb [Hkv, nb, b, D];
        keys past a query's position are masked whatever they hold."""
        out = self.attention_lanes(q[None], kb[None], vb[None], np.asarray(q_pos)[None])
        return self._out(out[0])

    def attention_lanes(
        self, q: mx.array, kb: mx.array, vb: mx.array, q_pos: np.ndarray
    ) -> mx.array:
        """`attention_blocks` for L lanes at once: q [L, n, Hq, D], kb [L, Hkv, nb, D, b],
        vb [L, Hkv, nb, b, D], q_pos [L, n] (-1: a padding row that sees nothing). Each
        (rows, D) @ (D, b) product is one lane's block, so a lane's rows get the bits they
        get alone; blocks past a row's position add exact zeros."""
        lanes, n, hq, d = q.shape
        _, hkv, nb, _, b = kb.shape
        group = hq // hkv
        self.probe_matmul(d, b)
        self.probe_matmul(b, d)
        rows = n * group
        scale = float(1.0 / np.sqrt(d))
        # rows ordered (token, head-in-group) for each kv head, repeated for every block:
        # [L, hkv, nb, rows, d] (a plain batch is faster than a broadcast one in mlx's matmul)
        qh = (q * scale).reshape(lanes, n, hkv, group, d).transpose(0, 2, 1, 3, 4)
        qh = qh.reshape(lanes, hkv, 1, rows, d)
        qh = mx.contiguous(mx.broadcast_to(qh, (lanes, hkv, nb, rows, d)))
        kb, vb = mx.contiguous(kb), mx.contiguous(vb)
        s = qh @ kb  # [L, hkv, nb, rows, b]: one (rows, d) @ (d, b) product per block
        key_pos = np.arange(nb * b).reshape(1, 1, nb, 1, b)
        row_pos = np.repeat(np.asarray(q_pos, dtype=np.int64), group, axis=1)
        row_pos = row_pos.reshape(lanes, 1, 1, rows, 1)
        s = mx.where(mx.array(key_pos <= row_pos), s, -mx.inf)
        m = mx.max(mx.max(s, axis=-1, keepdims=True), axis=2, keepdims=True)  # [L,hkv,1,rows,1]
        m = mx.where(mx.isinf(m), 0.0, m)
        p = mx.exp(s - m)  # masked keys: exp(-inf) = 0 exactly
        block_sums = mx.sum(p, axis=-1)  # [L, hkv, nb, rows], fixed length b
        pv = p @ vb  # [L, hkv, nb, rows, d]: one (rows, b) @ (b, d) product per block
        total = block_sums[:, :, 0]
        acc = pv[:, :, 0]
        for j in range(1, nb):
            total = total + block_sums[:, :, j]
            acc = acc + pv[:, :, j]
        total = mx.where(total > 0, total, 1.0)
        out = (acc / total[..., None]).reshape(lanes, hkv, n, group, d)
        return self._out(mx.contiguous(out.transpose(0, 2, 1, 3, 4).reshape(lanes, n, hq, d)))
