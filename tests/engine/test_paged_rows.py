"""engine/ops/paged_rows.py `place_rows` against the segment-by-segment layout it replaced in
CupyKV.fixed_rows, array for array, on random steps: any row count, segment lengths, starts
across page ends, padding, and the refusals."""

from __future__ import annotations

import numpy as np
import pytest

from engine.ops.base import KVSegment
from engine.ops.paged_rows import place_rows


def reference(segments: list[KVSegment], rows: int, pr: int, lp: int, scratch: int):  # type: ignore[no-untyped-def]
    slots = np.full(rows, scratch * pr, dtype=np.int64)
    fresh = np.zeros(rows, dtype=np.int32)
    ptab = np.full((rows, lp), scratch, dtype=np.int32)
    last = np.zeros(rows, dtype=np.int32)
    i = 0
    for seg in segments:
        n, used = seg.count, -(-(seg.start + seg.count) // pr)
        if not n or used > lp or used > len(seg.pages) or i + n > rows:
            return None
        pos = seg.start + np.arange(n)
        pages = np.asarray(seg.pages[:used], dtype=np.int64)
        ptab[i : i + n, :used] = pages
        slots[i : i + n] = pages[pos // pr] * pr + pos % pr
        last[i : i + n] = pos
        fresh[i : i + n] = seg.start
        i += n
    poff = np.arange(rows, dtype=np.int32) * lp
    return {"slots": slots, "ptab": ptab.reshape(-1), "poff": poff, "last": last, "fresh": fresh}


def same(got, want) -> None:  # type: ignore[no-untyped-def]
    assert (got is None) == (want is None)
    if want is None:
        return
    assert got.keys() == want.keys()
    for name, a in want.items():
        assert got[name].dtype == a.dtype, name
        assert np.array_equal(got[name], a), name


@pytest.mark.parametrize("seed", range(300))
def test_place_rows_equals_the_segment_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pr = int(rng.choice([1, 4, 16]))
    lp = int(rng.integers(1, 9))
    scratch = 1000
    segs, free = [], list(rng.permutation(999))
    for lane in range(int(rng.integers(1, 9))):
        count = int(rng.integers(0 if seed % 17 == 0 else 1, 2 * pr + 3))
        room = lp * pr - count + (2 if seed % 11 == 0 else 1)  # past a lane's pages: refused
        start = int(rng.integers(0, max(1, room)))
        given = int(rng.integers(0, lp + 2)) if seed % 5 == 0 else lp
        pages = [int(free.pop()) for _ in range(given)]
        segs.append(KVSegment(lane, pages, start, count))
    total = sum(s.count for s in segs)
    rows = max(1, total + int(rng.integers(-1 if seed % 7 == 0 else 0, 4)))
    same(place_rows(segs, rows, pr, lp, scratch), reference(segs, rows, pr, lp, scratch))


def test_place_rows_decode_step_of_eight() -> None:
    segs = [KVSegment(i, list(range(10 * i, 10 * i + 10)), 37 + i, 1) for i in range(8)]
    got = place_rows(segs, 8, 16, 10, 999)
    assert got is not None
    want = [(10 * i + (37 + i) // 16) * 16 + (37 + i) % 16 for i in range(8)]
    assert got["slots"].tolist() == want
    same(got, reference(segs, 8, 16, 10, 999))
