"""The cupy backend's knobs, typed and read once where the backend is made (get_ops).

`CupyOptions.from_environ()` is the only place that reads ENGINE_CUPY_* from the
environment; the backend and everything under it take the frozen object.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from engine.errors import InputError

# steps of more rows run eagerly (shapes: engine/model/graph_shape.py). A 512-token prompt's
# kernels take 9.35 ms on the H200 and its eager step 10.4-12.6 (docs/cupy.md, seventh
# session): graphs up to 512 rows give its ~300 launches programmatic dependent launch
# (H100, eighth session: 55.7k tok/s against 50.7k with 64-row graphs)
MAX_GRAPH_ROWS = 512
GEMMS = ("cublas", "own", "mma")
# the row tile where none is given: cuBLAS's kernel (hence its bits) depends on the row count,
# so it runs every GEMM at one; the own GEMMs sum in an order that depends on K alone, so a
# step's graph need not pad its rows to more than it has
ROW_TILES = {"cublas": 8, "own": 1, "mma": 1}
# the integer knobs: ENGINE_CUPY_<name> -> field; >= 0, the switches 0 or 1
_SWITCHES = (
    ("SILU_EPILOGUE", "silu_epilogue"),
    ("ATTEND_THREAD_SCORES", "attend_thread_scores"),
    ("ATTEND_EARLY", "attend_early"),
    ("ATTEND_STORE", "attend_store"),
    ("ATTEND_TAIL", "attend_tail"),
    ("WIDE_DEEP", "wide_deep"),
)
_COUNTS = (
    ("ATTEND_SPLIT", "attend_split"),
    ("ATTEND_SPLIT_HEADS", "attend_split_heads"),
    ("ATTEND_HEADS_FROM", "attend_heads_from"),
    ("ATTEND_TILE", "attend_tile"),
    ("GRAPH_ROWS", "graph_rows"),
    ("WIDE_FROM", "wide_from"),
    *_SWITCHES,
)


@dataclass(frozen=True)
class CupyOptions:
    """row_tile: the one row count every cuBLAS GEMM runs at (it picks the kernel, hence the
    bits: one value per deployment), and what a graph step's rows are padded to; 0: by the
    GEMM (ROW_TILES). graphs: run steps of up to graph_rows rows as replayed
    CUDA graphs (False: every step eagerly, with the same bits)."""

    row_tile: int = 0
    graphs: bool = True
    graph_rows: int = MAX_GRAPH_ROWS
    # attention launches of fewer (row, head) pairs than this run one block per key group
    # and a merge (more SMs at work; the same bits: see attend_paged); 0: never
    attend_split: int = 512
    # a split launch of at least attend_heads_from (row, q head) pairs puts up to
    # attend_split_heads q heads of one KV head in a block (4, 2 or 1; each chunk of keys
    # staged once for them); the same bits. H200, 0.6B shape: 8 streams (128 pairs) 5.5 %
    # faster a step, 1 stream (16 pairs) 4.6 % slower (half the blocks). 0 or 1 heads: never
    attend_split_heads: int = 4
    attend_heads_from: int = 128
    # attention launches of at least this many rows (a prompt step) run a block per tile of
    # rows and KV head, each chunk of keys staged once for all its pairs; the same bits. 0: never
    attend_tile: int = 64
    # 1: the tile kernel scores a key a thread (attend_<kind>_<D>_tile_ts), with the warp's
    # arithmetic; the same bits. 0: a key a warp. H100, 512-token prompt: with wide_from
    # 128, 30.7-31.8k tok/s against 25.7-26.3k (docs/cupy.md). Staged split launches always
    # score a key a thread
    attend_thread_scores: int = 1
    # 1: a split launch copies the keys its step did not write before it waits for the
    # kernel before it (cupy_attend.cu, `early`); the same bits. 0: after. H100: decode step
    # replay 1.26 ms against 1.29 at 1 stream, 1.76 against 1.78 at 8; gpu.yaml with it on
    # every split launch kept e8fbb48's bits (receipts/examples/gpu-h100-early-copies.md)
    attend_early: int = 1
    # 1: a graph step's split attention launch makes the q/k norms, RoPE and K/V write itself
    # from the qkv rows (cupy_attention.attend_qkv; one launch fewer a layer, the same bits).
    # 0: qkv_norm_rope_store, then the attention. Measured slower (H100: 1.46 ms a step
    # against 1.27 at 1 stream): off, and its kernels compiled only where it is on (CupyOps)
    attend_store: int = 0
    # 1: a split launch whose blocks all stay resident with it lets a group take its last
    # chunk, if it holds at most 32 keys, in the turn before (cupy_attend_plan.tail_fits; one
    # chunk pass fewer on the launch's longest path, the same bits). 0: a turn of its own
    attend_tail: int = 0
    # which GEMM runs the linear layers: "mma" (cupy_mma.cu: tensor cores, any row count),
    # "cublas" (at the fixed row tile) or "own" (cupy_gemm.cu: a warp per output, any row
    # count); each another summation, other bits (docs/cupy.md: mma is the fastest measured)
    gemm: str = "mma"
    # captured graphs launch our kernels with programmatic dependent launch (cupy_launch.py):
    # the next kernel's launch overlaps the tail of the one before; the same kernels, bits.
    # Hopper and later (CupyOps turns it off on older GPUs)
    pdl: bool = True
    # with mma, the gate/up GEMM makes SiLU-mul's output in the same launch
    # (cupy_fused_linear.py; the same bits). 1: on, 0: off
    silu_epilogue: int = 1
    # with mma, GEMMs of at least this many rows (a prompt step) run the wide kernel
    # (cupy_mma_wide.cu: tiles staged in shared memory); the same bits. 0: never
    wide_from: int = 128
    # 1: a wide GEMM of no more blocks than the device has SMs keeps eight chunks in flight
    # (mma_wide_gemm_deep), not three; the same bits. 0: three. A 512-token prompt on an
    # H100 (eighth session): 8.1 ms against 9.2 (63.3k tok/s against 55.7k), its o and down
    # GEMMs one block an SM
    wide_deep: int = 1

    def __post_init__(self) -> None:
        if self.row_tile < 0:
            raise InputError(
                f"ENGINE_CUPY_ROW_TILE: must be >= 1 (0: by the GEMM), got {self.row_tile}"
            )
        if self.graph_rows < 0:
            raise InputError(f"cupy options: graph_rows must be >= 0, got {self.graph_rows}")
        if self.attend_split < 0:
            raise InputError(f"ENGINE_CUPY_ATTEND_SPLIT: must be >= 0, got {self.attend_split}")
        if self.attend_tile < 0:
            raise InputError(f"ENGINE_CUPY_ATTEND_TILE: must be >= 0, got {self.attend_tile}")
        if self.wide_from < 0:
            raise InputError(f"ENGINE_CUPY_WIDE_FROM: must be >= 0, got {self.wide_from}")
        for name, field in _SWITCHES:
            if getattr(self, field) not in (0, 1):
                got = getattr(self, field)
                raise InputError(f"ENGINE_CUPY_{name}: must be 0 or 1, got {got}")
        if self.gemm not in GEMMS:
            raise InputError(f"ENGINE_CUPY_GEMM: '{self.gemm}' is not one of {', '.join(GEMMS)}")
        if not self.row_tile:
            object.__setattr__(self, "row_tile", ROW_TILES[self.gemm])

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> CupyOptions:
        """ENGINE_CUPY_ROW_TILE (a positive integer; default by the GEMM, ROW_TILES),
        ENGINE_CUPY_GRAPHS (1 or 0, default 1), ENGINE_CUPY_PDL (1 or 0, default 1),
        ENGINE_CUPY_ATTEND_SPLIT, ENGINE_CUPY_ATTEND_SPLIT_HEADS, ENGINE_CUPY_ATTEND_HEADS_FROM,
        ENGINE_CUPY_ATTEND_TILE and ENGINE_CUPY_GRAPH_ROWS (integers >= 0, default 512, 4,
        128, 64 and 512), ENGINE_CUPY_SILU_EPILOGUE, ENGINE_CUPY_ATTEND_THREAD_SCORES,
        ENGINE_CUPY_ATTEND_EARLY, ENGINE_CUPY_ATTEND_STORE, ENGINE_CUPY_ATTEND_TAIL and
        ENGINE_CUPY_WIDE_DEEP (0 or 1, default 1, 1, 1, 0, 0, 1),
        ENGINE_CUPY_WIDE_FROM (rows, default 128; 0: never), ENGINE_CUPY_GEMM (mma, cublas or own,
        default mma); a bad value is one InputError naming the variable."""
        env = os.environ if environ is None else environ
        tile = env.get("ENGINE_CUPY_ROW_TILE", "").strip()
        if tile and (not tile.isdigit() or int(tile) < 1):
            raise InputError(f"ENGINE_CUPY_ROW_TILE: '{tile}' is not a positive integer")
        graphs = env.get("ENGINE_CUPY_GRAPHS", "1").strip()
        if graphs not in ("0", "1"):
            raise InputError(f"ENGINE_CUPY_GRAPHS: '{graphs}' is not 0 or 1")
        pdl = env.get("ENGINE_CUPY_PDL", "1").strip()
        if pdl not in ("0", "1"):
            raise InputError(f"ENGINE_CUPY_PDL: '{pdl}' is not 0 or 1")
        ints = {}
        for name, field in _COUNTS:
            got = env.get(f"ENGINE_CUPY_{name}", str(getattr(cls, field))).strip()
            if not got.isdigit():
                raise InputError(f"ENGINE_CUPY_{name}: '{got}' is not an integer >= 0")
            ints[field] = int(got)
        gemm = env.get("ENGINE_CUPY_GEMM", cls.gemm).strip()
        return cls(row_tile=int(tile or 0), graphs=graphs == "1", gemm=gemm, pdl=pdl == "1", **ints)
