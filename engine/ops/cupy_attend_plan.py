"""Which form of the attention kernels (cupy_attend.cu, cupy_attend_tile.cu) a launch takes,
and the shared memory each form asks for. Plain Python, no CuPy: the choice is tested
without a GPU (tests/engine/test_cupy_attend_plan.py). Every form gives the same bits, so
the choice weighs speed and what the device can launch, never the result:

* "tile": launches of at least `options.attend_tile` rows (a prompt or verify step); a block
  per (tile of rows, KV head) stages each chunk of keys once for its pairs;
* "split": launches of fewer than `options.attend_split` (row, q head) pairs (a decode
  step); a block per key group, the last one of a pair merging; at D <= STAGE_DIMS and at
  least `options.attend_heads_from` pairs a block takes up to `options.attend_split_heads` q
  heads of one KV head (SPLIT_HEADS), each chunk staged once for them (half the blocks: a
  gain where one-head blocks would not all run at once, a loss where they would);
* "pair": a block per (row, q head) pair, the rest.

With `options.attend_tail` a staged split launch whose blocks all fit on the device at once
with TAIL_KEYS more keys staged a block (tail_fits) runs the `_tail` kernel: a group takes its
last chunk, if it has at most TAIL_KEYS keys, in the turn before it: one pass fewer on the
launch's longest path (the group of the last chunk), the same float operations.

A form whose block needs more shared memory than the device gives is passed over: the tile's
rows halve until a tile fits, the split form steps aside for "pair".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ATTEND_HEAD_DIMS = (32, 64, 128, 256)  # attend_<kind>_<D> in cupy_attend.cu
GROUPS = 4  # ATT_NG in cupy_kernels.cu
CODE_BYTES = {"f32": 4, "bf16": 2, "fp8": 1}  # a stored code of each kind
STAGE_DIMS = 128  # the split and tile kernels stage a chunk's codes in shared memory up to this D
TILE_PAIRS = 16  # (row, q head) pairs a tile block takes at most
TILE_WARPS = 8  # TILE_WARPS in cupy_attend_tile.cu: a tile block's warps, a pair each at a time
KPAD = 1  # KPAD in cupy_attend_stage.cu: pieces after a staged K row a thread scores whole
SPLIT_HEADS = (4, 2)  # attend_<kind>_<D>_split<QH> in cupy_attend.cu (D <= STAGE_DIMS)
SPLIT_FORMS = ("_split", *(f"_split{h}" for h in SPLIT_HEADS))  # the split kernels' suffixes
TAIL_KEYS = 32  # ATT_TAILK in cupy_attend_stage.cu: the most keys of a tail chunk staged apart


@dataclass(frozen=True)
class Form:
    name: str  # "tile", "split" or "pair"
    shared: int  # bytes of shared memory a block asks for
    rows: int = 0  # tile: rows a block takes
    heads: int = 1  # split: q heads (of one KV head) a block takes
    # a key's score a thread: tile, the _tile_ts kernel; split, always where staged
    thread_scores: bool = False

    @property
    def kernel(self) -> str:
        """The suffix of its kernel's name (CupyOps.attend_k[kind, d, suffix])."""
        if self.name == "split":
            return "_split" if self.heads == 1 else f"_split{self.heads}"
        if self.name == "tile":
            return "_tile_ts" if self.thread_scores else "_tile"
        return ""


def split_shared(kind: str, d: int, heads: int = 1) -> int:
    """Shared bytes of one split block of `heads` q heads: their floats, and at d <=
    STAGE_DIMS a chunk's K and V codes (d keys of d codes each), staged once for all, the K
    rows padded for a key's score a thread (the store's kernels, which score a key a warp,
    ask for the same)."""
    staged = (2 * d * CODE_BYTES[kind] + 16 * KPAD) * d if d <= STAGE_DIMS else 0
    return heads * (6 * d + 2 * GROUPS) * 4 + staged


def tail_shared(kind: str, d: int, heads: int = 1) -> int:
    """Shared bytes a split block of `heads` q heads takes past split_shared for a tail chunk
    (the _tail kernels, cupy_attend.cu): its TAIL_KEYS keys' codes (K rows padded), each slot's
    weights and second tree, and the keys' exponents and rows."""
    pieces = d * CODE_BYTES[kind] // 16
    return TAIL_KEYS * (2 * pieces + KPAD) * 16 + (heads * (TAIL_KEYS + d) + 3 * TAIL_KEYS) * 4


def tail_fits(
    form: Form, blocks: int, kind: str, d: int, device: tuple[int, int, int], regs: int = 0
) -> bool:
    """Whether a split launch of `blocks` blocks of `form` may take tails: staged, and on a
    device of (multiprocessors, shared bytes a multiprocessor, shared bytes a block at most)
    every block resident at once with the tail's bytes, so no block waits for a free
    multiprocessor because of them. Residency counts shared memory, threads, the blocks cap
    and, where `regs` (the _tail kernel's registers a thread) is known, registers."""
    sms, sm_shared, limit = device
    if form.name != "split" or not form.thread_scores or not sms:
        return False
    tailed = form.shared + tail_shared(kind, d, form.heads)
    return tailed <= limit and blocks <= sms * resident(tailed, d * form.heads, regs, sm_shared)


def resident(shared: int, threads: int, regs: int, sm_shared: int) -> int:
    """Blocks of `shared` bytes and `threads` threads of `regs` registers each (0: not
    counted) that one multiprocessor holds at once (Hopper: 2,048 threads, 64 K registers
    given out 256 a warp, 32 blocks; the device keeps 1 KB of shared memory a block)."""
    fit = min(sm_shared // (shared + 1024), 2048 // threads, 32)
    if regs:
        warp_regs = -(-regs * 32 // 256) * 256
        fit = min(fit, (64 << 10) // (warp_regs * -(-threads // 32)))
    return fit


def split_heads(n: int, hq: int, hkv: int, d: int, kind: str, options: Any, limit: int) -> int:
    """q heads a split block of a launch of n rows takes: from options.attend_heads_from
    pairs on, the most of SPLIT_HEADS that divides the q heads a KV head, is at most
    options.attend_split_heads and fits `limit` bytes; else 1."""
    if d > STAGE_DIMS or n * hq < max(1, options.attend_heads_from):
        return 1
    for heads in SPLIT_HEADS:
        fits = split_shared(kind, d, heads) <= limit
        if heads <= options.attend_split_heads and (hq // hkv) % heads == 0 and fits:
            return heads
    return 1


def tile_shared(kind: str, d: int, pairs: int, rows: int, thread_scores: bool = False) -> int:
    """Shared bytes of one tile block of `pairs` pairs over `rows` rows: a chunk's K and V
    codes (with thread scores, K rows padded), each pair's q and its groups' state, a warp's
    weights, and per key or row."""
    floats = pairs * d + TILE_WARPS * d + 2 * d + 2 * pairs * GROUPS + pairs * GROUPS * d
    pad = 16 * KPAD * d if thread_scores else 0
    return 2 * d * d * CODE_BYTES[kind] + pad + 4 * (floats + d + rows)


def pair_shared(d: int) -> int:
    """Shared bytes of one block per (row, q head) pair: its groups' floats."""
    return (d + 5 * GROUPS * d + 2 * GROUPS) * 4


def tile_rows(n: int, hq: int, hkv: int, d: int, kind: str, options: Any, limit: int) -> int:
    """Rows a tile block takes for a launch of n rows; 0: no tile (few rows, D past
    STAGE_DIMS, more q heads a KV head than TILE_PAIRS, or no tile fits `limit` bytes)."""
    least, qpk = options.attend_tile, hq // hkv
    if not least or n < least or d > STAGE_DIMS or qpk > TILE_PAIRS:
        return 0
    rows = TILE_PAIRS // qpk
    ts = bool(options.attend_thread_scores)
    while rows and tile_shared(kind, d, rows * qpk, rows, ts) > limit:
        rows //= 2
    return rows


def choose(n: int, hq: int, hkv: int, d: int, kind: str, options: Any, limit: int) -> Form:
    """The form of a launch of n rows of hq q heads over hkv KV heads of d dims stored as
    `kind` codes, under `options` (CupyOptions) on a device of `limit` shared bytes a block."""
    rows = tile_rows(n, hq, hkv, d, kind, options, limit)
    if rows:
        ts = bool(options.attend_thread_scores)
        return Form(
            "tile", tile_shared(kind, d, rows * (hq // hkv), rows, ts), rows, thread_scores=ts
        )
    if n * hq < options.attend_split and split_shared(kind, d) <= limit:
        heads = split_heads(n, hq, hkv, d, kind, options, limit)
        staged = d <= STAGE_DIMS
        return Form("split", split_shared(kind, d, heads), heads=heads, thread_scores=staged)
    return Form("pair", pair_shared(d))


def shared_asks(kind: str, d: int, limit: int) -> dict[str, int]:
    """What each form's kernel at (kind, d) must be allowed past the 48 KB a launch gets
    unasked (at most `limit`): the most any of its launches asks for."""
    need = {"_tile": tile_shared(kind, d, TILE_PAIRS, TILE_PAIRS)}
    need["_tile_ts"] = tile_shared(kind, d, TILE_PAIRS, TILE_PAIRS, thread_scores=True)
    need["_split"] = split_shared(kind, d)
    need |= {f"_split{h}": split_shared(kind, d, h) for h in SPLIT_HEADS}
    need |= {f"{form}_fs": need[form] for form in SPLIT_FORMS}
    if d <= STAGE_DIMS:  # the _tail kernels: a block and its tail
        for heads, form in zip((1, *SPLIT_HEADS), SPLIT_FORMS, strict=True):
            need[f"{form}_tail"] = need[form] + tail_shared(kind, d, heads)
    return {form: min(b, limit) for form, b in need.items() if b > 48 << 10}
