"""Fixed-shape steps of the cupy backend as CUDA graphs: captured once, replayed after.

The caller (the model) hands the backend a step as named host arrays of fixed shapes (its
inputs) and a body: a function that, given the owner (the KV memory the step writes) and
device copies of those inputs, runs the step's kernels and returns its outputs. This module
knows nothing else of either. The first call for an (owner, key) copies the inputs into
fixed device buffers, runs the body once (warm: kernels loaded, cuBLAS on the stream), then
captures it; every call after overwrites the buffers and replays. Replay runs exactly the
kernels of the eager body, so its bits are the eager bits (tests/engine/test_cupy_backend.py).

Graphs are kept per owner in a weak map: they go when the owner goes (its device arrays
are what the captured kernels point at), and no graph holds the owner. Every buffer the
capture allocates stays the graph's for its lifetime (a pool of its own): memory handed out
again after capture would be overwritten by a replay.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

import cupy as cp
import cupyx
import numpy as np

from engine.ops.cupy_rows import DeviceRows, RowBlock

PINNED_BYTES = 1 << 16  # outputs this large come back through page-locked memory
# outputs whose rows are this wide (logits) stay on the device until read (cupy_rows.py)
DEVICE_ROW_BYTES = 1 << 16
Body = Callable[[Any, dict[str, Any]], tuple[Any, ...]]


class StepGraph:
    """One captured body over fixed input buffers, on its own stream."""

    def __init__(self, inputs: dict[str, np.ndarray], body: Body) -> None:
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.shapes = {name: (a.shape, np.dtype(a.dtype)) for name, a in inputs.items()}
        # every input lives in one device buffer at 16-byte aligned offsets, staged in one
        # page-locked host buffer: a step's inputs go over in one copy
        self.offsets: dict[str, tuple[int, int]] = {}
        total = 0
        for name, a in inputs.items():
            self.offsets[name] = (total, a.nbytes)
            total += -(-a.nbytes // 16) * 16
        self.staging = cupyx.empty_pinned(max(16, total), dtype=np.uint8)
        with self.stream:  # no kernel on another stream may race `fill`: empty, not zeros
            self.buffer = cp.empty(max(16, total), dtype=np.uint8)
        self.dev = {
            name: cp.ndarray(
                a.shape, dtype=a.dtype, memptr=self.buffer.data + self.offsets[name][0]
            )
            for name, a in inputs.items()
        }
        self.body = body  # holds what the body reads (the model), never the owner
        self.graph: Any = None
        self.out: tuple[Any, ...] = ()
        self.keep: list[Any] = []

    def fill(self, inputs: dict[str, np.ndarray]) -> None:
        """Write the step's inputs into the fixed buffers: staged, then one copy on the
        graph's stream (the last step's copy is done: each run ends synchronized)."""
        if inputs.keys() != self.shapes.keys() or any(
            (a.shape, a.dtype) != self.shapes[name] for name, a in inputs.items()
        ):
            got = {name: (a.shape, a.dtype) for name, a in inputs.items()}
            raise ValueError(f"step graph: inputs {got} differ from the captured {self.shapes}")
        for name, host in inputs.items():
            off, size = self.offsets[name]
            self.staging[off : off + size] = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        self.buffer.set(self.staging, stream=self.stream)

    def capture(self, owner: Any) -> None:
        """Warm, then capture the body. The capture allocates from a memory pool of the
        graph's own, kept for the graph's life and never used again: a buffer freed during
        the capture is reused by a later kernel of the same capture (one stream: the replay
        runs them in order), so a graph holds its body's peak, not the sum of its buffers."""
        own = cp.cuda.MemoryPool()
        with self.stream:
            self.body(owner, self.dev)  # warm: cuBLAS follows this stream, kernels are loaded
            self.stream.synchronize()
            cp.cuda.set_allocator(own.malloc)
            try:
                self.stream.begin_capture()
                self.out = self.body(owner, self.dev)
                self.graph = self.stream.end_capture()
            finally:
                cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
        self.keep = [own]

    def rows_to_host(self, take: np.ndarray | tuple[np.ndarray, ...]) -> tuple[Any, ...]:
        """Rows `take` of each output (take[i] of output i, where a tuple), gathered and
        copied on the graph's stream after its replay. Wide rows (logits) are copied on the
        device only: a DeviceRows, read on the host only if asked (cupy_rows.py). Another
        large one lands in page-locked memory, so the copy runs at full PCIe speed, and is
        handed out as it is: a fresh buffer of CuPy's pinned pool each step, which takes the
        last one back once nobody holds it."""
        takes = take if isinstance(take, tuple) else (take,) * len(self.out)
        if len(takes) != len(self.out):
            raise ValueError(f"step graph: {len(takes)} row lists for {len(self.out)} outputs")
        hosts = []
        with self.stream:
            for out, rows in zip(self.out, takes, strict=True):
                rows = np.asarray(rows, dtype=np.int64)
                k = len(rows)
                prefix = bool(np.array_equal(rows, np.arange(k)))  # decode: the first k rows
                part = out[:k] if prefix else out[cp.asarray(rows)]
                if k and part.ndim == 2 and part.shape[1] * part.itemsize >= DEVICE_ROW_BYTES:
                    # a copy: the next replay overwrites the graph's buffer
                    hosts.append(DeviceRows(RowBlock(part.copy() if prefix else part), 0, k))
                    continue
                if part.nbytes >= PINNED_BYTES:
                    host = cupyx.empty_pinned(part.shape, dtype=part.dtype)
                else:
                    host = np.empty(part.shape, dtype=part.dtype)
                if k:
                    part.get(stream=self.stream, out=host)
                hosts.append(host)
        self.stream.synchronize()
        return tuple(hosts)

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


class StepGraphs:
    """The backend's graph cache: per owner (weakly), per key."""

    def __init__(self) -> None:
        self._by_owner: weakref.WeakKeyDictionary[Any, dict[Hashable, StepGraph]] = (
            weakref.WeakKeyDictionary()
        )

    def run(
        self,
        owner: Any,
        key: Hashable,
        inputs: dict[str, np.ndarray],
        body: Body,
        take: np.ndarray | tuple[np.ndarray, ...],
    ) -> tuple[Any, ...]:
        """Rows `take` of each of the body's outputs for these inputs, on the host, through
        the graph of (owner, key)."""
        cp.cuda.get_current_stream().synchronize()  # eager work before this step is done
        graphs = self._by_owner.setdefault(owner, {})
        g = graphs.get(key)
        if g is None:
            g = graphs[key] = StepGraph(inputs, body)
        g.fill(inputs)
        if g.graph is None:
            # the warm-up and the capture run the body on these inputs (K/V written twice);
            # the replay below writes the same bytes again, so nothing is left over
            g.capture(owner)
        g.graph.launch(g.stream)
        return g.rows_to_host(take)

    def get(self, owner: Any, key: Hashable) -> StepGraph | None:
        return self._by_owner.get(owner, {}).get(key)
