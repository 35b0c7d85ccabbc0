"""cupy backend (CUDA). Batch-invariant by construction:

* linear layers: bf16 inputs and weights, f32 accumulation and output. By default the
  backend's own tensor-core GEMM (cupy_mma.cu), whose sums depend on K alone. With
  ENGINE_CUPY_GEMM=cublas, cublasGemmEx with CUBLAS_COMPUTE_32F always at ONE row count,
  `row_tile`: the rows are cut into tiles of that many rows (the last zero-padded) and each
  tile is its own GEMM of the same shape, so a row meets the same kernel whether it runs
  alone or beside others. cuBLAS keeps a row's bits at a fixed M whatever the other rows hold
  (measured on an H200, cuBLAS 13.1); not across M. `probe_linear` checks this for every
  weight at load time and refuses to run where it fails.
* RMSNorm, RoPE, SiLU-mul, the KV codec and attention are own kernels (cupy_kernels.cu) with
  one fixed reduction order per row: one block per row, no atomics, no split reductions.
* attention reads the K/V codes straight from the pages (cupy_kv.py), in chunks of head_dim
  keys at absolute positions, so a row's result depends on its position and the stored
  bytes alone.

Activations are float32 cupy arrays on the device.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, replace
from typing import Any

import cupy as cp
import ml_dtypes
import numpy as np

from engine.errors import EngineFailure
from engine.ops import (
    cupy_attention,
    cupy_fused_linear,
    cupy_gemm,
    cupy_heads,
    cupy_modules,
    cupy_moe,
    cupy_norms,
    cupy_probe,
    cupy_rows,
)
from engine.ops.cupy_blas import Cublas
from engine.ops.cupy_graph import Body, StepGraph, StepGraphs
from engine.ops.cupy_info import device_info
from engine.ops.cupy_kv import CupyKV
from engine.ops.cupy_lanes import CupyLanes
from engine.ops.cupy_launch import or_null, pdl_body, pdl_kernels
from engine.ops.cupy_options import CupyOptions
from engine.ops.grouped_concat import grouped_concat

F32 = cp.float32


@dataclass
class CupyWeight:
    """A linear weight: bf16 bits [N, K] (nn.Linear layout) on the device; `shape` is
    (in, out) like the other backends' prepared weights."""

    data: Any
    k: int
    n: int
    batch: int = 1  # row tiles per GEMM call (cupy_blas.steady_batch); 1: a call a tile

    @property
    def shape(self) -> tuple[int, int]:
        return (self.k, self.n)


# the most row tiles one GEMM call takes (a 512-row prompt step at tile 8)
BATCH_TILES = 64


def _blocks(total: int, threads: int = 256) -> tuple[int, ...]:
    return (max(1, -(-total // threads)),)


def _unit_cols(a: Any) -> Any:
    """A float32 2-D array whose columns are adjacent (rows may be apart)."""
    if a.dtype != F32 or a.ndim != 2 or a.strides[1] != 4 or a.strides[0] % 4:
        return cp.ascontiguousarray(a, dtype=F32)
    return a


class CupyOps:
    name = "cupy"

    def __init__(self, options: CupyOptions | None = None, probe: bool = True) -> None:
        self.options = options or CupyOptions()
        if self.options.pdl and int(cp.cuda.Device().compute_capability) < 90:
            # griddepcontrol is Hopper's (PDL_ENTRY compiles to nothing before it)
            self.options = replace(self.options, pdl=False)
        # the tile changes which GEMM kernel runs, hence the bits: one value per deployment
        self.row_tile = self.options.row_tile
        # steps of up to graph_rows rows replay captured CUDA graphs; False runs them
        # eagerly (the same bits: tests/engine/test_cupy_backend.py)
        self.graphs = self.options.graphs
        self._graphs = StepGraphs()
        self.probe = probe
        self._bf16: tuple[Any, Any] | None = None  # (y, its bf16 bits): see _bf16_out
        self.key_block = 0  # attention chunks are head_dim keys long (see the kernel)
        self.module = cupy_modules.main_module()
        self.k = {
            n: self.module.get_function(n)
            for n in (
                "to_bf16", "rms_norm", "add_rms_norm", "embed_norm_concat", "rope", "silu_mul",
                "kv_store", "kv_store2", "qk_norm_rope", "qkv_norm_rope_store", "expert_gemv",
                "moe_route", "moe_gate_up", "moe_down", *cupy_gemm.KERNELS,
                *cupy_gemm.MMA_KERNELS,
                *cupy_gemm.WIDE_KERNELS,
            )
        }  # fmt: skip
        store, tail = bool(self.options.attend_store), bool(self.options.attend_tail)
        self.modules = [self.module]  # and the options' own (bench/cupy_attend_phases.py)
        self.attend_k = cupy_modules.attend_kernels(self.module, store, tail, self.modules)
        self.shared_limit = cupy_attention.shared_limit()
        self.device_shape = cupy_attention.device_shape()
        self.tail_regs = cupy_attention.tail_regs(self.attend_k)
        cupy_attention.allow_shared(self.attend_k, self.shared_limit)
        if self.shared_limit >= cupy_gemm.WIDE_DEEP_SHARED:  # else wide_kernel never picks it
            self.k["mma_wide_gemm_deep"].max_dynamic_shared_size_bytes = cupy_gemm.WIDE_DEEP_SHARED
        self.pdl_kernels = pdl_kernels(self.k, self.attend_k)
        # the split attention's counters (cupy_attention.py); earlier ones stay alive for the
        # graphs captured with them
        self._counters: list[Any] = [cp.zeros(max(1, self.options.attend_split), dtype=cp.int32)]
        self.blas = Cublas()
        # provenance: GPU, NVIDIA driver, CUDA driver API and runtime, cuBLAS, CuPy
        self.info = device_info(self.blas.version)

    # ---- conversion -----------------------------------------------------------------
    def asarray(self, a: Any) -> Any:
        if isinstance(a, cp.ndarray):
            return cp.ascontiguousarray(a, dtype=F32)
        return cp.asarray(np.ascontiguousarray(a, dtype=np.float32))

    def to_numpy(self, a: Any) -> np.ndarray:
        return cp.asnumpy(a) if isinstance(a, cp.ndarray) else np.asarray(a)

    # ---- linear ---------------------------------------------------------------------
    def prepare_linear(self, w_out_in: np.ndarray) -> CupyWeight:
        w = np.ascontiguousarray(np.asarray(w_out_in, dtype=np.float32))
        bits = w.astype(ml_dtypes.bfloat16).view(np.uint16)
        weight = CupyWeight(cp.asarray(bits), k=w.shape[1], n=w.shape[0])
        if self.probe and not self._own_gemm(weight):
            weight.batch = self.blas.steady_batch(
                weight.data.data.ptr, weight.n, weight.k, self.row_tile, BATCH_TILES
            )
        if self.probe:
            self.probe_linear(weight)
        return weight

    def _own_gemm(self, w: CupyWeight) -> bool:
        return self.options.gemm != "cublas" and cupy_gemm.fits(self.options.gemm, w.k)

    def _bf16_out(self, y: Any) -> Any:
        """The bf16 twin of a 2-D output y that a kernel is about to write (rows padded to
        the tile with zeros, as linear's conversion makes them), remembered for the next
        linear of exactly y; None (write no twin) for other shapes."""
        if y.ndim != 2 or not y.shape[0]:
            return None
        m, k = y.shape
        padded = -(-m // self.row_tile) * self.row_tile
        yb = cp.empty((padded, k), dtype=cp.uint16)
        if padded > m:
            yb[m:] = 0
        self._bf16 = (y, yb)
        return yb

    def _twin_of(self, x: Any) -> Any:
        """The bf16 twin remembered for x (the same memory, shape and strides: a view like
        attention's reshaped output counts), or None."""
        twin = self._bf16
        if twin is None or not isinstance(x, cp.ndarray):
            return None
        y = twin[0]
        same = x.data.ptr == y.data.ptr and x.shape == y.shape and x.strides == y.strides
        return twin[1] if same and x.dtype == y.dtype else None

    def bf16_rows(self, x: Any, w: CupyWeight) -> tuple[Any, int]:
        """x's bf16 bits [rows padded to the tile, k] for a GEMM with w, and its row count:
        the twin a kernel wrote beside x (rms_norm, silu_mul, attention: the same bits
        to_bf16 would make of the same floats, one launch fewer), else one to_bf16 launch."""
        xb = self._twin_of(x)
        if xb is not None:
            m, k = x.shape
        else:
            x = cp.ascontiguousarray(x, dtype=F32)
            m, k = x.shape
        if k != w.k:
            raise EngineFailure(f"cupy linear: input has {k} columns, weight expects {w.k}")
        if xb is None:
            padded = max(1, -(-m // self.row_tile)) * self.row_tile
            xb = cp.empty((padded, k), dtype=cp.uint16)
            self.k["to_bf16"](
                _blocks(padded * k), (256,), (x, xb, np.int64(m * k), np.int64(padded * k))
            )
        return xb, m

    def linear(self, x: Any, w: CupyWeight) -> Any:
        xb, m = self.bf16_rows(x, w)
        k, t = w.k, self.row_tile
        padded = max(1, -(-m // t)) * t
        if self._own_gemm(w):
            own = cupy_gemm.mma if self.options.gemm == "mma" else cupy_gemm.gemm
            return own(self, xb, m, w)
        y = cp.empty((padded, w.n), dtype=F32)
        xs, ys = k * 2, w.n * 4  # bytes per row
        for i in range(0, padded, t * w.batch):
            count = min(w.batch, (padded - i) // t)
            x_ptr, y_ptr = xb.data.ptr + i * xs, y.data.ptr + i * ys
            if count == 1:
                self.blas.gemm_bf16(x_ptr, w.data.data.ptr, y_ptr, t, w.n, k)
            else:
                self.blas.gemm_bf16_tiles(x_ptr, w.data.data.ptr, y_ptr, t, count, w.n, k)
        return y[:m]

    def linear_silu(self, x: Any, w: CupyWeight, inter: int) -> Any | None:
        return cupy_fused_linear.linear_silu(self, x, w, inter)

    def probe_linear(self, w: CupyWeight) -> None:
        """Refuse to run if a row's bits change with its slot or its neighbours."""
        cupy_probe.probe_linear(self, w)

    # ---- elementwise and per-row kernels --------------------------------------------
    def embed(self, table: Any, ids: Any) -> Any:
        if not isinstance(ids, cp.ndarray):
            ids = cp.asarray(np.asarray(ids, dtype=np.int64))
        return table[ids]

    def rms_norm(self, x: Any, w: Any, eps: float) -> Any:
        return cupy_norms.rms_norm(self, x, w, eps)

    def add_rms_norm(self, a: Any, b: Any, w: Any, eps: float) -> tuple[Any, Any] | None:
        return cupy_norms.add_rms_norm(self, a, b, w, eps)

    def embed_norm_concat(
        self, table: Any, ids: Any, hidden: Any, we: Any, wh: Any, eps: float
    ) -> Any | None:
        return cupy_norms.embed_norm_concat(self, table, ids, hidden, we, wh, eps)

    def rope(self, x: Any, cos: Any, sin: Any) -> Any:
        x = cp.ascontiguousarray(x, dtype=F32)
        n, heads, d = x.shape
        y = cp.empty_like(x)
        total = n * heads * (d // 2)
        if total:
            args = (x, cos, sin, y, np.int32(heads), np.int32(d // 2), np.int64(total))
            self.k["rope"](_blocks(total), (256,), args)
        return y

    def qk_norm_rope(
        self, qkv: Any, hq: int, hkv: int, qw: Any, kw: Any, eps: float, cos: Any, sin: Any
    ) -> tuple[Any, Any] | None:
        return cupy_heads.qk_norm_rope(self, qkv, hq, hkv, qw, kw, eps, cos, sin)

    def qk_norm_rope_store(
        self, qkv: Any, hq: int, hkv: int, qw: Any, kw: Any, eps: float, *cos_sin_target: Any
    ) -> Any | None:
        return cupy_heads.qk_norm_rope_store(self, qkv, hq, hkv, qw, kw, eps, *cos_sin_target)

    def split_counters(self, pairs: int) -> Any:
        """At least `pairs` int32 counters, all zero between launches (cupy_attention.py)."""
        if self._counters[-1].size < pairs:
            self._counters.append(cp.zeros(pairs, dtype=cp.int32))
        return self._counters[-1]

    def silu_mul(self, gate: Any, up: Any) -> Any:
        gate, up = _unit_cols(gate), _unit_cols(up)
        n, inter = gate.shape
        y = cp.empty((n, inter), dtype=F32)
        if n:
            gs, us = gate.strides[0] // 4, up.strides[0] // 4
            yb = self._bf16_out(y)
            sizes = (np.int32(inter), np.int64(gs), np.int64(us), np.int64(n * inter))
            args = (gate, up, y, or_null(yb), *sizes)
            self.k["silu_mul"](_blocks(n * inter), (256,), args)
        return y

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def greedy_ids(self, x: Any) -> Any:
        """Each row's greedy token (int64 on the device; np.argmax's rule: cupy_rows.py), for
        graph bodies that feed it to the next embed."""
        return cupy_rows.greedy_ids(x)

    def expert_linear(self, x: Any, w: CupyWeight) -> Any:
        """A warp per output and row (cupy_moe.py), the dot product the fused MoE kernels
        use; the fixed-tile linear where the reduction does not fit that kernel."""
        if not cupy_moe.fits(w.k, w.n):
            return self.linear(x, w)
        return cupy_moe.gemv(self, x, w)

    def scale_rows(self, x: Any, w: np.ndarray) -> Any:
        return x * cp.asarray(np.asarray(w, dtype=np.float32))[:, None]

    def moe_ffn(self, x: Any, moe: Any) -> Any:
        """All on the device (cupy_moe.py: routing, then the experts at a fixed shape per
        (row, rank)), so decode graphs capture it; the host-routed engine/ops/moe.py path
        over expert_linear where the shapes do not suit the kernels."""
        if cupy_moe.usable(moe):
            return cupy_moe.moe_ffn(self, x, moe)
        from engine.ops.moe import moe_ffn

        return moe_ffn(self, x, moe)

    def moe_route(self, logits: Any, k: int, norm: bool) -> tuple[Any, Any]:
        """Routing on the device (ids int32, weights float32), as moe_ffn routes."""
        return cupy_moe.route(self, logits, k, norm)

    def concat_rows(self, parts: list[Any]) -> Any:
        return grouped_concat(parts, 0, cp.concatenate)  # graph-safe: grouped_concat.py

    def concat_cols(self, parts: list[Any]) -> Any:
        return grouped_concat(parts, 1, cp.concatenate)

    def take_rows(self, x: Any, rows: np.ndarray) -> Any:
        return x[cp.asarray(np.asarray(rows, dtype=np.int64))]

    # ---- attention ------------------------------------------------------------------
    def attend_qkv(self, qkv: Any, heads: tuple, target: Any, meta: Any, fresh: Any) -> Any | None:
        """Attention with the q/k norms, RoPE and K/V write in its launch, or None; see
        cupy_attention.attend_qkv."""
        return cupy_attention.attend_qkv(self, qkv, heads, target, meta, fresh)

    def attend(self, kind: str, q: Any, kc: Any, vc: Any, ke: Any, ve: Any, meta: Any) -> Any:
        """q [n, Hq, D] over codes [slots, Hkv, D] through meta = (ptab, poff, last,
        page_rows) device arrays; see cupy_attention.attend."""
        return cupy_attention.attend(self, kind, q, kc, vc, ke, ve, meta)

    def attention(self, q: Any, k: Any, v: Any, q_pos: np.ndarray) -> Any:
        """Causal attention of q [n, Hq, D] at absolute positions q_pos over contiguous
        k, v [L, Hkv, D] (float32): one page of L rows."""
        k = cp.ascontiguousarray(k, dtype=F32)
        v = cp.ascontiguousarray(v, dtype=F32)
        n = q.shape[0]
        meta = (
            cp.zeros(1, dtype=cp.int32),
            cp.zeros(n, dtype=cp.int32),
            cp.asarray(np.asarray(q_pos, dtype=np.int32)),
            max(1, k.shape[0]),
        )
        return self.attend("f32", q, k, v, None, None, meta)

    def attention_many(self, items: list[tuple]) -> list[Any]:
        return [self.attention(*item) for item in items]

    @property
    def graph_rows(self) -> int:
        """The most rows a step may have to run as a replayed graph (0: graphs are off)."""
        return self.options.graph_rows if self.graphs else 0

    def run_graph(
        self,
        owner: Any,
        key: Hashable,
        inputs: dict[str, np.ndarray],
        body: Body,
        take: np.ndarray | tuple[np.ndarray, ...],
    ) -> tuple[Any, ...] | None:
        """Rows `take` (or take[i] of output i) of each output of body(owner, device copies
        of inputs), on the host,
        through a CUDA graph captured at the first call for (owner, key) and replayed after
        (cupy_graph.py); None where graphs are off (the caller runs eagerly, same bits)."""
        if not self.graphs:
            return None
        return self._graphs.run(owner, key, inputs, pdl_body(self, body), take)

    def step_graph(self, owner: Any, key: Hashable) -> StepGraph | None:
        """The graph run_graph keeps for (owner, key), for benchmarks (replay_ms)."""
        return self._graphs.get(owner, key)

    def moe_in_graph(self, moe: Any) -> bool:
        """Whether this sparse MLP runs all on the device (routing too), so a graph takes it."""
        return cupy_moe.usable(moe)

    def memory_available(self) -> int:
        """Free device memory: where this backend's KV cache lives (engine/kv/budget.py)."""
        return int(cp.cuda.runtime.memGetInfo()[0])

    def new_kv(self, *shape_and_kind: object, **kw: object) -> object:
        return CupyKV(self, *shape_and_kind, **kw)

    def new_lanes(self, layers: int, lanes: int, rows: int, kv_heads: int, head_dim: int) -> object:
        return CupyLanes(self, layers, lanes, rows, kv_heads, head_dim)
