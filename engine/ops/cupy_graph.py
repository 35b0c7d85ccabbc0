"""Plain steps of the cupy backend as CUDA graphs, captured once per row count and replayed.

A step of at most MAX_ROWS rows (decode: every segment one token; a prompt step: one segment
of up to MAX_ROWS tokens; no taps) runs at `rows` = its row count rounded up to
`ops.row_tile`: the segments' rows first, then padded rows whose K/V go to the KV memory's
scratch page. The graph runs exactly the kernels of the eager forward at that row count (the
eager linear pads to the same tile; norms, RoPE, the KV store and attention work per row; a
row's logits come from a GEMM tile of other rows, which `probe_linear` checked keeps its
bits), so replay gives the eager bits, which tests/engine/test_cupy_backend.py checks.

Inputs live in fixed device buffers (token ids, RoPE rows, slots, page lists, positions)
that each step overwrites before the replay. Every buffer the captured work allocates is
kept for the graph's lifetime: memory freed after capture could be handed out again and
overwritten by a replay.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import cupyx
import numpy as np

from engine.model.qwen3 import SegmentOut, decoder_block, next_norm
from engine.ops import cupy_moe

MAX_ROWS = 64  # the engine's default prompt step; steps of more rows run eagerly


def decode_step(model: Any, segments: list[Any], kv: Any, taps: tuple[int, ...] = ()) -> Any:
    """The forward's outputs through a graph, or None where this step is not a plain one
    of at most MAX_ROWS rows (the caller then runs the eager forward)."""
    tile = model.ops.row_tile
    total = sum(len(s.tokens) for s in segments)
    rows = max(1, -(-total // tile)) * tile
    if taps or not segments or rows > max(tile, MAX_ROWS):
        return None
    if any(layer.moe is not None and not cupy_moe.usable(layer.moe) for layer in model.layers):
        return None  # this MoE routes on the host (shapes the kernels do not take): eager
    for s in segments:
        n, used = len(s.tokens), -(-(s.start + len(s.tokens)) // kv.page_rows)
        if not n or used > kv.lane_pages or used > len(s.pages):
            return None  # the eager forward says what is wrong
        if s.start + n > model.config.max_position_embeddings:
            return None
    graphs = kv.__dict__.setdefault("_decode_graphs", {})
    graph = graphs.get((id(model), rows))
    if graph is None:
        graph = graphs[id(model), rows] = DecodeGraph(model, kv, rows)
    return graph.run(segments)


class DecodeGraph:
    def __init__(self, model: Any, kv: Any, rows: int) -> None:
        self.model, self.kv, self.rows = model, kv, rows
        cfg = model.config
        half = cfg.head_dim // 2
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.ids = cp.zeros(rows, dtype=cp.int64)
        self.cos = cp.zeros((rows, half), dtype=cp.float32)
        self.sin = cp.zeros((rows, half), dtype=cp.float32)
        self.slots = cp.zeros(rows, dtype=cp.int64)
        self.ptab = cp.zeros(rows * kv.lane_pages, dtype=cp.int32)
        self.poff = cp.asarray(np.arange(rows, dtype=np.int32) * kv.lane_pages)
        self.last = cp.zeros(rows, dtype=cp.int32)
        self.graph = None
        self.keep: list[Any] = []
        self.out: tuple[Any, Any] | None = None

    def _fill(self, segments: list[Any]) -> None:
        """Write the step's inputs into the fixed buffers (on the graph's stream)."""
        kv, m, r, pr = self.kv, self.model, self.rows, self.kv.page_rows
        pos = np.zeros(r, dtype=np.int64)
        ids = np.zeros(r, dtype=np.int64)
        ptab = np.full((r, kv.lane_pages), kv.scratch, dtype=np.int32)
        slots = np.full(r, kv.scratch * pr, dtype=np.int64)
        i = 0
        for s in segments:
            n = len(s.tokens)
            p = s.start + np.arange(n)
            pages = np.asarray(s.pages[: -(-(s.start + n) // pr)], dtype=np.int64)
            ids[i : i + n] = s.tokens
            pos[i : i + n] = p
            ptab[i : i + n, : len(pages)] = pages
            slots[i : i + n] = pages[p // pr] * pr + p % pr
            i += n
        last = pos.astype(np.int32)  # causal: a row sees keys up to its own position
        for dev, host in (
            (self.ids, ids),
            (self.cos, m.cos[pos]),
            (self.sin, m.sin[pos]),
            (self.slots, slots),
            (self.ptab, ptab.reshape(-1)),
            (self.last, last),
        ):
            dev.set(np.ascontiguousarray(host), stream=self.stream)

    def _body(self) -> tuple[Any, Any]:
        """The eager forward's work for `rows` rows, reading only the fixed buffers."""
        m, kv, ops, cfg = self.model, self.kv, self.model.ops, self.model.config
        meta = (self.ptab, self.poff, self.last, kv.page_rows)
        x = ops.embed(m.embed, self.ids)
        h = ops.rms_norm(x, m.layers[0].in_norm, cfg.rms_norm_eps) if m.layers else None
        for li, layer in enumerate(m.layers):

            def attend(q: Any, k: Any, v: Any, li: int = li) -> Any:
                ke = kv.k_exp[li] if kv.k_exp else None
                ve = kv.v_exp[li] if kv.v_exp else None
                kv.store_kv(li, k, v, self.slots)
                return ops.attend(kv.kind, q, kv.k[li], kv.v[li], ke, ve, meta)

            x, h = decoder_block(
                cfg, ops, layer, x, h, self.cos, self.sin, attend, next_norm(m, li)
            )
        final = h if h is not None else ops.rms_norm(x, m.norm, cfg.rms_norm_eps)
        return ops.linear(final, m.lm_head), final

    def _capture(self) -> None:
        pool = cp.get_default_memory_pool()
        keep: list[Any] = []

        def alloc(size: int) -> Any:
            mem = pool.malloc(size)
            keep.append(mem)
            return mem

        with self.stream:
            self._body()  # warm: cuBLAS follows this stream, kernels are loaded
            self.stream.synchronize()
            cp.cuda.set_allocator(alloc)
            try:
                self.stream.begin_capture()
                self.out = self._body()
                self.graph = self.stream.end_capture()
            finally:
                cp.cuda.set_allocator(pool.malloc)
        self.keep = keep

    def run(self, segments: list[Any]) -> list[SegmentOut]:
        cp.cuda.get_current_stream().synchronize()  # eager work before this step is done
        self._fill(segments)
        if self.graph is None:
            # capture writes K/V of the filled rows (twice: warm-up and capture itself);
            # the replay below writes the same bytes again, so nothing is left over
            self._capture()
        self.graph.launch(self.stream)
        logits, hidden = self.out
        need, bounds, a = [], [0], 0
        for s in segments:
            need.extend(a + int(j) for j in np.asarray(s.logit_rows, dtype=np.int64))
            bounds.append(len(need))
            a += len(s.tokens)
        k = len(need)
        # page-locked, so the copy back runs at full PCIe speed, and handed out as it is (no
        # copy on the host: 4.9 MB at 8 rows): a fresh buffer of CuPy's pinned pool each step,
        # which gives the last step's buffer back once nobody holds its rows any more
        host = cupyx.empty_pinned((k, logits.shape[1]), dtype=np.float32)
        with self.stream:
            if need == list(range(k)):  # decode: the first k rows
                lg, hd = logits[:k], hidden[:k]
            else:
                idx = cp.asarray(np.asarray(need, dtype=np.int64))
                lg, hd = logits[idx], hidden[idx]
            if k:
                lg.get(stream=self.stream, out=host)
            hid = hd.get(stream=self.stream)
        self.stream.synchronize()
        return [
            SegmentOut(
                logits=host[lo:hi] if hi > lo else None,
                hidden=hid[lo:hi],
                taps={},
                start=s.start,
            )
            for s, lo, hi in zip(segments, bounds[:-1], bounds[1:], strict=True)
        ]

    def replay_ms(self, reps: int = 50) -> float:
        """GPU time of one replay alone (no inputs written, nothing copied back)."""
        start, end = cp.cuda.Event(), cp.cuda.Event()
        self.graph.launch(self.stream)
        start.record(self.stream)
        for _ in range(reps):
            self.graph.launch(self.stream)
        end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / reps
