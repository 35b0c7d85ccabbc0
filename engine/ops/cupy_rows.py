"""Logits rows of a captured step left on the GPU until something reads them.

A step's wide output (logits: a vocabulary per row) comes back from `run_graph` as a
`DeviceRows` over one `RowBlock` (the step's rows, copied out of the graph's buffer on the
device). Greedy decoding asks only `greedy()` of it: one kernel over every row of the block
gives each row's argmax and top-1 minus top-2 margin, and only those two numbers a row come
back. Logit hashes (`hashes()`) come from the same kernel, in the same copy back.
Anything else (a sampled row, `np.asarray`, `.tobytes()`) copies the whole
block to the host once, through page-locked memory, and reads it there.

The kernel's rule is the host's (engine/lanes/sampling.py: `np.argmax` and `margin`): the
largest value, the lowest id among equals, a NaN before any number (the first NaN); the
margin is top-1 minus the largest value left once that one id is taken out, one float32
subtraction. One block of GREEDY_THREADS threads per row, a fixed tree, no atomics: the
order is fixed, and the pair (value, id) is a total order, so the pick is too.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import cupyx
import numpy as np

GREEDY_THREADS = 256

GREEDY_IN = 8  # loads a thread has in flight (scan_rows)

_SOURCE = (
    f"#define GREEDY_T {GREEDY_THREADS}\n#define GREEDY_IN {GREEDY_IN}\n"
    + r"""
#define NEG_INF __int_as_float(0xff800000)
// a comes before b: a NaN before a number (the lower id of two NaNs), else the larger, else
// the lower id
__device__ __forceinline__ bool first(float a, int ia, float b, int ib) {
    bool na = isnan(a), nb = isnan(b);
    if (na || nb) return na && (!nb || ia < ib);
    return a > b || (a == b && ia < ib);
}
// max that keeps a NaN (as numpy's max does)
__device__ __forceinline__ float nan_max(float a, float b) {
    return (isnan(a) || a > b) ? a : b;
}
// the logit hash of engine/lanes/sampling.py row_hash_words: a sum mod 2^64, so the tree
// below gives the host's bits whatever its order
__device__ __forceinline__ unsigned long long mix64(unsigned long long x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
// one pass over a row: its argmax id and margin, and its logit hash; out[row] = {hash,
// id | margin bits << 32}, so the host reads all three in one copy
extern "C" __global__ void scan_rows(const float* __restrict__ x, long long cols,
                                     unsigned long long* __restrict__ out) {
    __shared__ float top[GREEDY_T];
    __shared__ int at[GREEDY_T];
    __shared__ float rest[GREEDY_T];
    __shared__ unsigned long long sums[GREEDY_T];
    const float* row = x + (long long)blockIdx.x * cols;
    int t = threadIdx.x;
    float tv = NEG_INF, sv = NEG_INF;
    int ti = 0x7fffffff;  // loses to any id: a row of -inf still picks id 0
    unsigned long long acc = 0;
    // a thread's elements t, t + GREEDY_T, .. in order as one loop would take them, GREEDY_IN
    // of them loaded before the first is looked at: one row a block reads far more than one
    // load a thread in flight (a 152k row took 0.17 ms so, 2026-12-07)
    for (long long j0 = t; j0 < cols; j0 += (long long)GREEDY_T * GREEDY_IN) {
        float vs[GREEDY_IN];
#pragma unroll
        for (int u = 0; u < GREEDY_IN; ++u) {
            const long long j = j0 + (long long)u * GREEDY_T;
            vs[u] = j < cols ? row[j] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < GREEDY_IN; ++u) {
            const long long j = j0 + (long long)u * GREEDY_T;
            if (j >= cols) break;
            const float v = vs[u];
            acc += mix64(((unsigned long long)j << 32) | __float_as_uint(v));
            if (first(v, (int)j, tv, ti)) {
                sv = nan_max(sv, tv);
                tv = v;
                ti = (int)j;
            } else {
                sv = nan_max(sv, v);
            }
        }
    }
    top[t] = tv; at[t] = ti; rest[t] = sv; sums[t] = acc;
    __syncthreads();
    for (int s = GREEDY_T / 2; s > 0; s >>= 1) {
        if (t < s) {
            float bv = top[t + s];
            int bi = at[t + s];
            float r = nan_max(rest[t], rest[t + s]);
            if (first(bv, bi, top[t], at[t])) {
                rest[t] = nan_max(r, top[t]);
                top[t] = bv;
                at[t] = bi;
            } else {
                rest[t] = nan_max(r, bv);
            }
            sums[t] += sums[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        float m = __fsub_rn(top[0], rest[0]);
        out[2 * blockIdx.x] = mix64(sums[0] ^ (unsigned long long)cols);
        out[2 * blockIdx.x + 1] = (unsigned long long)(unsigned int)at[0]
                                  | ((unsigned long long)__float_as_uint(m) << 32);
    }
}
"""
)

_MODULE: Any = None


def _kernel(name: str) -> Any:
    global _MODULE
    if _MODULE is None:
        _MODULE = cp.RawModule(code=_SOURCE, options=("-std=c++17",))
    return _MODULE.get_function(name)


def scan_device(x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(argmax ids int64 [k], margins float32 [k], logit hashes uint64 [k]) of the rows of a
    device float32 [k, V]: one kernel, one copy back."""
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    k, cols = x.shape
    out = cp.empty((k, 2), dtype=cp.uint64)
    if k:
        _kernel("scan_rows")((k,), (GREEDY_THREADS,), (x, np.int64(cols), out))
    words = out.get()
    low = (words[:, 1] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    high = (words[:, 1] >> np.uint64(32)).astype(np.uint32)
    return low.astype(np.int64), high.view(np.float32), words[:, 0].copy()


def greedy_ids(x: Any) -> Any:
    """The argmax id (int64 [k], on the device) of each row of a device float32 [k, V], by
    `greedy_device`'s rule; nothing comes back to the host, so a captured graph can take it."""
    x = cp.ascontiguousarray(x, dtype=cp.float32)
    k, cols = x.shape
    out = cp.empty((k, 2), dtype=cp.uint64)
    if k:
        _kernel("scan_rows")((k,), (GREEDY_THREADS,), (x, np.int64(cols), out))
    return (out[:, 1] & np.uint64(0xFFFFFFFF)).astype(cp.int64)


def greedy_device(x: Any) -> tuple[np.ndarray, np.ndarray]:
    """(argmax ids int64 [k], margins float32 [k]) of the rows of a device float32 [k, V]."""
    ids, margins, _ = scan_device(x)
    return ids, margins


def hash_device(x: Any) -> np.ndarray:
    """The 64-bit logit hash (uint64 [k]) of each row of a device float32 [k, V]."""
    return scan_device(x)[2]


class RowBlock:
    """A step's rows on the device; their host copy and greedy picks, each made once."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self._host: np.ndarray | None = None
        self._scan: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def host(self) -> np.ndarray:
        if self._host is None:
            host = cupyx.empty_pinned(self.dev.shape, dtype=self.dev.dtype)
            self.dev.get(out=host)
            self._host = host
        return self._host

    def scan(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, margins, hashes) of every row: greedy and hashes come from one kernel."""
        if self._scan is None:
            self._scan = scan_device(self.dev)
        return self._scan

    def greedy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.scan()[:2]

    def hashes(self) -> np.ndarray:
        return self.scan()[2]


class DeviceRows:
    """Rows lo..hi of a RowBlock (`single`: the one row lo, as a 1-D array). Reads like the
    host array it stands for: indexing and slicing stay on the device; everything else
    (numpy functions, attributes, `==`) reads the host copy."""

    __slots__ = ("block", "lo", "hi", "single")

    def __init__(self, block: RowBlock, lo: int, hi: int, single: bool = False) -> None:
        self.block, self.lo, self.hi, self.single = block, lo, hi, single

    @property
    def shape(self) -> tuple[int, ...]:
        cols = int(self.block.dev.shape[1])
        return (cols,) if self.single else (self.hi - self.lo, cols)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.block.dev.dtype)

    @property
    def ndim(self) -> int:
        return 1 if self.single else 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        if self.single:
            return self.__array__()[key]
        n = self.hi - self.lo
        if isinstance(key, (int, np.integer)):
            i = int(key) + (n if key < 0 else 0)
            if not 0 <= i < n:
                raise IndexError(f"row {key} of {n}")
            return DeviceRows(self.block, self.lo + i, self.lo + i + 1, single=True)
        if isinstance(key, slice) and key.step in (None, 1):
            lo, hi, _ = key.indices(n)
            return DeviceRows(self.block, self.lo + lo, self.lo + max(lo, hi))
        return self.__array__()[key]

    def __iter__(self) -> Any:
        if self.single:
            return iter(self.__array__())
        return (self[i] for i in range(len(self)))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        host = self.block.host()
        rows = host[self.lo] if self.single else host[self.lo : self.hi]
        if dtype is not None:
            return rows.astype(dtype)
        return rows.copy() if copy else rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__array__(), name)

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return self.__array__() == other

    __hash__ = None  # type: ignore[assignment]

    def greedy(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, margins) of these rows, from one kernel over the block's rows."""
        ids, margins = self.block.greedy()
        return ids[self.lo : self.hi], margins[self.lo : self.hi]

    def hashes(self) -> np.ndarray:
        """The logit hash (uint64) of each of these rows, from one kernel over the block."""
        return self.block.hashes()[self.lo : self.hi]
