"""KV memory of the cupy backend: the encoded pages live on the device.

Pages hold the codes of engine/kv/codec.py (bf16 bits, or fp8 e4m3 with an int8 power-of-two
exponent per position and KV head, or f32), encoded by the kv_store kernel with the same
bytes. Attention reads and decodes the codes straight from the pages through each row's page
list, so there is no decoded copy per lane and `open_lane` has nothing to do: a reused prefix
is read from the same pages, with the same bytes, as the stream that wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import cupy as cp
import numpy as np

from engine.errors import InputError
from engine.kv import codec
from engine.ops.base import KVSegment, StoredAttend
from engine.ops.paged_rows import place_rows

CODE_DTYPES = {"bf16": cp.uint16, "fp8": cp.uint8, "f32": cp.float32}
KINDS = {"f32": 0, "bf16": 1, "fp8": 2}  # the code kind as the kernels take it


@dataclass(frozen=True)
class KVTarget:
    """Where a step's K/V rows go: (codes, fp8 exponents or None) of K and of V, each row's
    slot (device int64), and the code kind (CupyOps.qk_norm_rope_store)."""

    k: tuple[Any, Any]
    v: tuple[Any, Any]
    slots: Any
    kind: str


class CupyKV:
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
        if kind not in CODE_DTYPES:
            raise InputError(f"--kv: '{kind}' is not supported by the cupy backend")
        self.ops = ops
        self.kind = kind
        self.page_rows = page_rows
        self.pages = pages
        self.lane_pages = max(1, -(-lane_rows // page_rows))  # the most pages one stream holds
        # slot = page * page_rows + row; one page more, `scratch`, takes the padded rows of a
        # fixed-shape step (`fixed_rows`), never a stream's
        self.scratch = pages
        shape = ((pages + 1) * page_rows, kv_heads, head_dim)
        dt = CODE_DTYPES[kind]
        self.k = [cp.zeros(shape, dtype=dt) for _ in range(layers)]
        self.v = [cp.zeros(shape, dtype=dt) for _ in range(layers)]
        self.k_exp = self.v_exp = None
        if kind == "fp8":
            self.k_exp = [cp.zeros(shape[:2], dtype=cp.int8) for _ in range(layers)]
            self.v_exp = [cp.zeros(shape[:2], dtype=cp.int8) for _ in range(layers)]
        self._key: tuple[Any, Any] | None = None
        self._meta: tuple[Any, ...] = ()

    @property
    def bytes(self) -> int:
        total = sum(a.nbytes for a in self.k + self.v)
        if self.k_exp is not None:
            total += sum(a.nbytes for a in self.k_exp + self.v_exp)
        return total

    def open_lane(self, lane: int, pages: list[int], rows: int) -> None:
        """Attention reads the pages themselves: a reused prefix needs no copy."""

    def read_codes(
        self, layer: int, pages: list[int], length: int
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray | None]:
        """The stored bytes of rows 0..length-1 on the host, in the codec's dtypes."""
        pos = np.arange(length)
        slots = cp.asarray(
            np.asarray(pages, dtype=np.int64)[pos // self.page_rows] * self.page_rows
            + pos % self.page_rows
        )
        dt = codec.code_dtype(self.kind)

        def rows(a: Any, view: Any = None) -> np.ndarray | None:
            if a is None:
                return None
            got = cp.asnumpy(a[slots])
            return got.view(view) if view is not None else got

        k_exp = self.k_exp[layer] if self.k_exp else None
        v_exp = self.v_exp[layer] if self.v_exp else None
        return rows(self.k[layer], dt), rows(k_exp), rows(self.v[layer], dt), rows(v_exp)

    def _rows_meta(self, segments: list[KVSegment], positions: np.ndarray) -> tuple[Any, ...]:
        """Device arrays for one forward: each new row's slot, and each row's page list
        (offset into one flat table) and last visible position. The forward passes the same
        list and array to every layer; holding them keeps the identity check sound."""
        if self._key is not None and self._key[0] is segments and self._key[1] is positions:
            return self._meta
        pr = self.page_rows
        slots, ptab, poff = [], [], []
        for seg in segments:
            pos = np.arange(seg.start, seg.start + seg.count)
            pages = np.asarray(seg.pages, dtype=np.int64)
            if len(pos) and pos[-1] // pr >= len(pages):
                raise InputError(
                    f"KV: rows up to position {pos[-1]} need more than the {len(pages)} pages given"
                )
            slots.append(pages[pos // pr] * pr + pos % pr)
            poff.append(np.full(seg.count, len(ptab), dtype=np.int32))
            ptab.extend(seg.pages)
        meta = (
            cp.asarray(np.concatenate(slots) if slots else np.zeros(0, np.int64)),
            cp.asarray(np.asarray(ptab or [0], dtype=np.int32)),
            cp.asarray(np.concatenate(poff) if poff else np.zeros(0, np.int32)),
            cp.asarray(np.asarray(positions, dtype=np.int32)),
        )
        self._key, self._meta = (segments, positions), meta
        return meta

    def store_attend(
        self,
        layer: int,
        segments: list[KVSegment],
        positions: np.ndarray,
        q: Any,
        k: Any,
        v: Any,
    ) -> Any:
        slots, ptab, poff, last = self._rows_meta(segments, positions)
        self.store_kv(layer, k, v, slots)
        ke = self.k_exp[layer] if self.k_exp else None
        ve = self.v_exp[layer] if self.v_exp else None
        meta = (ptab, poff, last, self.page_rows)
        return self.ops.attend(self.kind, q, self.k[layer], self.v[layer], ke, ve, meta)

    def fixed_rows(self, segments: list[KVSegment], rows: int) -> dict[str, np.ndarray] | None:
        """Host arrays that place a step's rows for a fixed shape of `rows` rows (paged_rows.py:
        each row's slot, page list and offset into it, last visible position and its segment's
        first position); rows past the segments' are padding, written to the scratch page and
        attending over it alone. None where a segment does not fit (the eager forward then
        says what is wrong)."""
        return place_rows(segments, rows, self.page_rows, self.lane_pages, self.scratch)

    def fixed_attend(self, layer: int, placed: dict[str, Any]) -> StoredAttend:
        """store_attend of `layer` for a step placed by `fixed_rows` (its arrays on the
        device), its store fusable into the q/k norm launch."""
        ke = self.k_exp[layer] if self.k_exp else None
        ve = self.v_exp[layer] if self.v_exp else None
        kc, vc, slots = self.k[layer], self.v[layer], placed["slots"]
        meta = (placed["ptab"], placed["poff"], placed["last"], self.page_rows)

        def store(k: Any, v: Any) -> None:
            store_rows(self.ops, k, v, (kc, ke), (vc, ve), slots, self.kind)

        def attend(q: Any) -> Any:
            return self.ops.attend(self.kind, q, kc, vc, ke, ve, meta)

        target = KVTarget((kc, ke), (vc, ve), slots, self.kind)

        def attend_qkv(qkv: Any, *heads: Any) -> Any | None:
            return self.ops.attend_qkv(qkv, heads, target, meta, placed["fresh"])

        return StoredAttend(target, store, attend, attend_qkv)

    def store_kv(self, layer: int, k: Any, v: Any, slots: Any) -> None:
        """`store` of k and of v [n, Hkv, D] into `slots` of `layer`, in one launch (the
        same bytes as two)."""
        ke = self.k_exp[layer] if self.k_exp else None
        ve = self.v_exp[layer] if self.v_exp else None
        kdst, vdst = (self.k[layer], ke), (self.v[layer], ve)
        store_rows(self.ops, k, v, kdst, vdst, slots, self.kind)

    def store(self, x: Any, slots: Any, codes: Any, exps: Any) -> None:
        """Encode rows x [n, Hkv, D] into `slots` of `codes` (and `exps` for fp8)."""
        x = _rows_apart(x)
        n, hkv, d = x.shape
        if n == 0:
            return
        args = (x, slots, codes, exps if exps is not None else slots, np.int32(KINDS[self.kind]))
        tail = (np.int32(hkv), np.int64(x.strides[0] // 4))
        self.ops.k["kv_store"]((n, hkv), (d,), (*args, *tail), shared_mem=d * 4)


def store_rows(
    ops: Any, k: Any, v: Any, kdst: tuple[Any, Any], vdst: tuple[Any, Any], slots: Any, kind: str
) -> None:
    """Encode k and v [n, Hkv, D] into `slots` of (codes, exponents or None) kdst and vdst, in
    one launch: the bytes of `store` of each."""
    k, v = _rows_apart(k), _rows_apart(v)
    n, hkv, d = k.shape
    if n == 0:
        return
    args = (
        k, np.int64(k.strides[0] // 4), kdst[0], _or(kdst[1], slots),  # exponents: fp8 only
        v, np.int64(v.strides[0] // 4), vdst[0], _or(vdst[1], slots),
        slots, np.int32(KINDS[kind]), np.int32(hkv),
    )  # fmt: skip
    ops.k["kv_store2"]((n, 2 * hkv), (d,), args, shared_mem=d * 4)


def _or(a: Any, b: Any) -> Any:
    return a if a is not None else b


def _rows_apart(x: Any) -> Any:
    """x [n, Hkv, D] as float32 with each row's heads adjacent (rows may be apart: a column
    slice of a wider output), copied only where it is not."""
    d = x.shape[-1]
    if x.dtype != cp.float32 or x.strides[1:] != (d * 4, 4) or x.strides[0] % 4:
        return cp.ascontiguousarray(x, dtype=cp.float32)
    return x
