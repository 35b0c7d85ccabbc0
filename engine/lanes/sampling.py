"""Exact sampling: greedy is argmax with ties to the lowest id; temperature > 0 draws by
Gumbel-max with noise from a counter-based hash of (seed, absolute position, token id), so a
token depends only on its row's logits, the seed and its position."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer, elementwise on uint64."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def uniforms(seed: int, position: int, vocab: int) -> np.ndarray:
    """Uniform (0, 1) float64 per token id, a pure function of (seed, position, id)."""
    with np.errstate(over="ignore"):
        key = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) * _GOLD + np.uint64(position))
        bits = _mix(key + np.arange(vocab, dtype=np.uint64) * _GOLD)
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def sample(logits: np.ndarray, temperature: float, seed: int, position: int) -> int:
    if temperature <= 0:
        return int(np.argmax(logits))
    gumbel = -np.log(-np.log(uniforms(seed, position, logits.shape[-1])))
    return int(np.argmax(logits.astype(np.float64) / temperature + gumbel))


def margin(logits: np.ndarray) -> float:
    """Top-1 minus top-2 logit (top-2: the largest value once one top-1 is taken out, so a
    tie gives 0). Two passes of max, not a partition: ~30x faster on a 152k vocabulary."""
    row = np.asarray(logits).reshape(-1)
    i = int(np.argmax(row))  # a NaN, if any, is taken first: the margin is NaN, as before
    lo, hi = row[:i], row[i + 1 :]
    second = max(lo.max(initial=-np.inf), hi.max(initial=-np.inf))
    return float(row[i] - second)


def device_greedy(logits: Any) -> tuple[list[int], list[float]] | None:
    """The greedy token (`sample` at temperature 0) and `margin` of each row of [k, V]
    logits that stay on the device (a backend's array-like with `greedy()`, e.g.
    engine/ops/cupy_rows.py): both computed there by the same rule, only they sent back.
    None for host rows: the caller takes `sample` and `margin` row by row."""
    on_device = getattr(logits, "greedy", None)
    if on_device is None:
        return None
    ids, margins = on_device()
    return [int(i) for i in ids], [float(m) for m in margins]


def row_hash_words(rows: np.ndarray) -> np.ndarray:
    """The 64-bit logit hash of each row of a float32 [k, V] array (docs/contract.md,
    `logit_hashes`): with w_i the float32 bits of element i, S = sum over i of
    mix((i << 32) | w_i) mod 2**64, the hash mix(S ^ V). A sum mod 2**64 gives the same bits
    in any order, so a GPU reduces a row in parallel to the host's value
    (engine/ops/cupy_rows.py); mix is a bijection, so one changed element always changes S."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    k, vocab = rows.shape
    x = rows.view(np.uint32).astype(np.uint64)
    x |= np.arange(vocab, dtype=np.uint64) << np.uint64(32)
    with np.errstate(over="ignore"):  # in place: a 152k row is 1.2 MB a temporary
        for shift, mul in ((30, _M1), (27, _M2)):
            x ^= x >> np.uint64(shift)
            x *= mul
        x ^= x >> np.uint64(31)
        return _mix(x.sum(axis=1, dtype=np.uint64) ^ np.uint64(vocab))


def hash_hex(word: int) -> str:
    return f"{int(word):016x}"


def logit_hash(logits: Any) -> str:
    """16 hex chars of one row's 64-bit logit hash: equal hashes mean bit-equal logits,
    which a greedy token alone does not show. A row left on the device is hashed there."""
    on_device = getattr(logits, "hashes", None)
    if on_device is not None:
        words = on_device()
        if len(words) != 1:
            raise ValueError(f"logit_hash: one row, got {len(words)}")
        return hash_hex(words[0])
    row = np.asarray(logits, dtype=np.float32)
    if row.ndim != 1:
        raise ValueError(f"logit_hash: one row, got shape {row.shape}")
    return hash_hex(row_hash_words(row[None, :])[0])


_POOL: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, pool)
_PARALLEL_BYTES = 1 << 16  # host rows this large hash on threads (numpy lets go of the GIL)
_LONG_ROW_BYTES = 1 << 16  # row_hashes: rows this large hash one by one, shorter in one pass


def _pool() -> ThreadPoolExecutor:
    """The hashing threads of this process: a forked child makes its own (its parent's
    threads do not exist in it)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)))
    return _POOL[1]


def logit_hashes(rows: list[Any]) -> list[str]:
    """logit_hash of each 1-D row: a step's rows on the device in one kernel; several large
    host rows on a few threads (a 152k-vocabulary row takes about a millisecond)."""
    on_host = all(getattr(r, "hashes", None) is None for r in rows)
    if not on_host or len(rows) < 2 or np.asarray(rows[0]).nbytes < _PARALLEL_BYTES:
        return [logit_hash(r) for r in rows]
    return list(_pool().map(logit_hash, rows))


def row_hashes(logits: Any, n: int) -> list[str]:
    """logit_hash of rows 0..n-1 of [k, V] logits: from the device's one kernel where they
    stay there; short host rows in one pass (5 rows of 1,088: 53 us CPU against 180 one by
    one), long ones one by one (5 of 151,936: 3.3 ms against 6.2 in one pass, whose
    temporaries leave the cache). All on this thread: a round's CPU time is what the speed
    gates read."""
    if n <= 0:
        return []
    on_device = getattr(logits, "hashes", None)
    if on_device is not None:
        return [hash_hex(w) for w in on_device()[:n]]
    rows = np.asarray(logits[:n], dtype=np.float32)
    if rows[0].nbytes >= _LONG_ROW_BYTES:
        return [logit_hash(r) for r in rows]
    return [hash_hex(w) for w in row_hash_words(rows)]
