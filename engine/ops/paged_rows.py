"""Where a fixed-shape step's rows go in a paged KV memory: host arrays, numpy only.

`place_rows` is the layout `CupyKV.fixed_rows` hands a captured step (cupy_kv.py): each
row's slot, its page list (one row of `lane_pages` pages, flat) and offset into it, its last
visible position and the first position its segment writes this step. Rows past the
segments' are padding: written to the scratch page and attending over it alone. Numpy only,
so host tests check it (tests/engine/test_paged_rows.py); a decode row (one a segment, every
stream's in a round) is placed by scalar stores, no arrays made for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from engine.ops.base import KVSegment


def place_rows(
    segments: Sequence[KVSegment], rows: int, page_rows: int, lane_pages: int, scratch: int
) -> dict[str, np.ndarray] | None:
    """The step's placement arrays (slots, ptab, poff, last, fresh), or None where a segment
    is empty, needs more pages than it was given or than a lane holds, or the segments have
    more than `rows` rows. A segment's rows are adjacent, at consecutive positions from its
    start (the split attention's early copies rely on it: cupy_attend.cu)."""
    pr = page_rows
    slots = np.full(rows, scratch * pr, dtype=np.int64)
    ptab = np.full((rows, lane_pages), scratch, dtype=np.int32)
    last = np.zeros(rows, dtype=np.int32)
    fresh = np.zeros(rows, dtype=np.int32)  # the first position the row's segment writes
    i = 0
    for seg in segments:
        n, start, pages = seg.count, seg.start, seg.pages
        used = -(-(start + n) // pr)
        if n <= 0 or used > lane_pages or used > len(pages) or i + n > rows:
            return None
        ptab[i : i + n, :used] = pages[:used]
        if n == 1:  # a decode row: scalars, no arrays made
            slots[i] = pages[start // pr] * pr + start % pr
            last[i] = start
        else:
            pos = np.arange(start, start + n)
            slots[i : i + n] = np.asarray(pages[:used], dtype=np.int64)[pos // pr] * pr + pos % pr
            last[i : i + n] = pos  # causal: a row sees keys up to its own position
        fresh[i : i + n] = start
        i += n
    poff = np.arange(rows, dtype=np.int32) * lane_pages
    return {"slots": slots, "ptab": ptab.reshape(-1), "poff": poff, "last": last, "fresh": fresh}
