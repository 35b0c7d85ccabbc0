"""The backend-ops interface: the only surface that differs between numpy, mlx and cupy.

Every op must be batch-invariant: a row's result has the same bits whatever other rows
are in the call, whatever its position among them, and however many there are.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

Array = Any


@dataclass(frozen=True)
class KVSegment:
    """Where one segment's rows go: its stream's lane, the lane's pages, the position of the
    first row and how many rows follow."""

    lane: int
    pages: list[int]
    start: int
    count: int


@dataclass(frozen=True)
class StoredAttend:
    """One layer's attention over rows placed in a KV memory, whose K/V write the backend can
    fuse into the q/k norm and RoPE launch (`Ops.qk_norm_rope_store` into `target`); then
    `attend(q)` reads the stored rows. Called as (q, k, v), it stores k/v and attends (the
    unfused path: the same bytes, the same output)."""

    target: Any
    store: Callable[[Array, Array], None]
    attend: Callable[[Array], Array]
    # (qkv, hq, hkv, q_norm, k_norm, eps, cos, sin) -> the attention output, with the q/k
    # norms, RoPE and the K/V write made in the attention's own launch (the same bytes and
    # output), or None where the backend does not fuse them for this step
    attend_qkv: Callable[..., Array | None] | None = None

    def __call__(self, q: Array, k: Array, v: Array) -> Array:
        self.store(k, v)
        return self.attend(q)


class Lanes(Protocol):
    """Float32 K/V rows per lane and layer on the backend's device, ready for attention."""

    def put(self, layer: int, lane: int, start: int, k: Array, v: Array) -> None: ...
    def zero(self, lane: int, rows: int) -> None: ...
    def attend(self, layer: int, lane: int, q: Array, q_pos: np.ndarray, length: int) -> Array:
        """Attention of q [n, Hq, D] at positions q_pos over the lane's rows 0..length-1."""
        ...


class KVMemory(Protocol):
    """The KV pages of every layer, owned by a backend on its own device.

    The forward hands it each layer's new K/V rows and queries; only what the caller asks
    for (attention output rows) comes back, in the backend's array type.
    """

    kind: str
    page_rows: int

    @property
    def bytes(self) -> int: ...
    def open_lane(self, lane: int, pages: list[int], rows: int) -> None: ...
    def read_codes(
        self, layer: int, pages: list[int], length: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """The stored bytes of rows 0..length-1, on the host: K codes, K exponents (fp8),
        V codes, V exponents. For tests and tools, not the hot path."""
        ...

    def store_attend(
        self,
        layer: int,
        segments: list[KVSegment],
        positions: np.ndarray,
        q: Array,
        k: Array,
        v: Array,
    ) -> Array:
        """Encode and store each segment's k/v rows [n, Hkv, D] in its pages, then return
        causal attention of q [N, Hq, D] over each segment's stored history."""
        ...

    def fixed_rows(self, segments: list[KVSegment], rows: int) -> dict[str, np.ndarray] | None:
        """Host arrays that place the segments' rows in a step of exactly `rows` rows (the
        rest padding that touches no stream's pages), for `fixed_attend`; None where
        this memory has no fixed-shape steps or the segments do not fit."""
        ...

    def fixed_attend(self, layer: int, placed: dict[str, Array]) -> StoredAttend:
        """store_attend of `layer` for the rows `fixed_rows` placed (its arrays on the
        device)."""
        ...


class Ops(Protocol):
    name: str
    row_tile: int
    key_block: int

    def asarray(self, a: np.ndarray) -> Array: ...
    def to_numpy(self, a: Array) -> np.ndarray: ...
    def prepare_linear(self, w_out_in: np.ndarray) -> Array: ...
    def embed(self, table: Array, ids: np.ndarray) -> Array: ...
    def linear(self, x: Array, w: Array) -> Array: ...
    def rms_norm(self, x: Array, w: Array, eps: float) -> Array: ...
    def rope(self, x: Array, cos: Array, sin: Array) -> Array: ...
    def silu_mul(self, gate: Array, up: Array) -> Array: ...
    def add(self, a: Array, b: Array) -> Array: ...
    def concat_rows(self, parts: list[Array]) -> Array: ...
    def concat_cols(self, parts: list[Array]) -> Array: ...
    def take_rows(self, x: Array, rows: np.ndarray) -> Array: ...
    def attention(self, q: Array, k: Array, v: Array, q_pos: np.ndarray) -> Array: ...
    def attention_many(
        self, items: list[tuple[Array, Array, Array, np.ndarray]]
    ) -> list[Array]: ...
    def expert_linear(self, x: Array, w: Array) -> Array:
        """A linear for expert rows: like `linear`, row-invariant at any row count, position
        and neighbours, but free to compute differently (numpy: one row at a time)."""
        ...

    def scale_rows(self, x: Array, w: np.ndarray) -> Array:
        """x [n, H] with row i multiplied by w[i] (float32)."""
        ...

    def moe_ffn(self, x: Array, moe: Any) -> Array:
        """The sparse MLP (engine.ops.moe.MoeWeights) of normed rows x [n, H]: per-row
        routing, experts on row-invariant linears, outputs summed by rank (docs/moe.md)."""
        ...

    def qk_norm_rope(
        self, qkv: Array, hq: int, hkv: int, qw: Array, kw: Array, eps: float, *cos_sin: Array
    ) -> tuple[Array, Array] | None:
        """q and k of a qkv projection, each head RMS-normed and roped, in one fused call,
        or None where the backend has none (the forward then runs rope(rms_norm(.)))."""
        ...

    def qk_norm_rope_store(
        self, qkv: Array, hq: int, hkv: int, qw: Array, kw: Array, eps: float, *cos_sin_target: Any
    ) -> Array | None:
        """qk_norm_rope's q, with k (normed, roped) and v written straight into a
        StoredAttend's target in the same launch (the bytes of the store after it), or None
        where the backend has no such fusion (the forward then stores, then attends)."""
        ...

    def embed_norm_concat(
        self, table: Array, ids: Array, hidden: Array, we: Array, wh: Array, eps: float
    ) -> Array | None:
        """[rms_norm(embed(table, ids), we), rms_norm(hidden, wh)] side by side (the MTP
        layer's input) in one fused call with the bits of those ops, or None where the
        backend has none."""
        ...

    def add_rms_norm(self, a: Array, b: Array, w: Array, eps: float) -> tuple[Array, Array] | None:
        """(a + b, rms_norm(a + b, w)) in one fused call with the bits of the two ops, or None
        where the backend has none (the forward then adds, then norms)."""
        ...

    def linear_silu(self, x: Array, w: Array, inter: int) -> Array | None:
        """silu_mul of linear(x, w)'s two halves (w: the gate rows, then the up rows) in one
        fused call with the bits of the two ops, or None where the backend has none."""
        ...

    @property
    def graph_rows(self) -> int:
        """The most rows a step may have to go through `run_graph` (0: the backend has no
        captured steps)."""
        ...

    def run_graph(
        self,
        owner: object,
        key: Hashable,
        inputs: dict[str, np.ndarray],
        body: Callable[[Any, dict[str, Array]], tuple[Array, ...]],
        take: np.ndarray | tuple[np.ndarray, ...],
    ) -> tuple[Any, ...] | None:
        """Rows `take` of each output (or take[i] of output i) of body(owner, inputs on the
        device), on the host, run
        as one fused call (cupy: a CUDA graph captured at the first call for (owner, key),
        replayed after) with the bits of running body eagerly, or None where the backend has
        none (the caller then runs eagerly). The inputs' shapes are fixed per key; the body
        may read only them, owner and what the caller keeps alive; the backend keeps what it
        captured no longer than owner. An output may come back as an array-like that reads
        as the host array but stays on the device until read (cupy: wide rows such as logits,
        with `greedy()`: engine/ops/cupy_rows.py)."""
        ...

    def moe_in_graph(self, moe: Any) -> bool:
        """Whether `run_graph` can take this sparse MLP (it runs all on the device)."""
        ...

    def new_kv(
        self,
        layers: int,
        pages: int,
        page_rows: int,
        kv_heads: int,
        head_dim: int,
        kind: str,
        lanes: int,
        lane_rows: int,
    ) -> KVMemory: ...
    def new_lanes(
        self, layers: int, lanes: int, rows: int, kv_heads: int, head_dim: int
    ) -> Lanes: ...
