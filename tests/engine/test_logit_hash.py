"""logit_hash: the reply's per-token fingerprint of the logits row it was sampled from."""

from __future__ import annotations

import hashlib

import numpy as np

from engine.lanes.sampling import logit_hash


def test_logit_hash_is_blake2b_over_float32_bytes() -> None:
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    want = hashlib.blake2b(row.tobytes(), digest_size=8).hexdigest()[:16]
    assert logit_hash(row) == want and len(want) == 16
    assert logit_hash(row.astype(np.float64)) == want  # hashed as float32


def test_one_ulp_changes_the_hash_but_not_the_argmax() -> None:
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    nudged = row.copy()
    nudged[3] = np.nextafter(nudged[3], np.float32(np.inf))
    assert int(np.argmax(row)) == int(np.argmax(nudged))
    assert logit_hash(row) != logit_hash(nudged)
    strided = np.stack([row, row], axis=1)[:, 0]  # not contiguous: same bytes once copied
    assert logit_hash(strided) == logit_hash(row)


def test_logit_hashes_on_threads_equal_one_by_one() -> None:
    from engine.lanes.sampling import logit_hashes

    rng = np.random.default_rng(8)
    rows = [rng.standard_normal(40000).astype(np.float32) for _ in range(9)]  # over 64 KiB
    assert logit_hashes(rows) == [logit_hash(r) for r in rows]
    assert logit_hashes(rows[:1]) == [logit_hash(rows[0])]


def test_margin_equals_top2_of_a_partition() -> None:
    """margin (two passes of max) against the partition it replaced: random rows, a tied top
    (margin 0), the top at either end, infinities."""
    from engine.lanes.sampling import margin

    def by_partition(row: np.ndarray) -> float:
        top2 = np.partition(row, -2)[-2:]
        return float(top2[1] - top2[0])

    rng = np.random.default_rng(9)
    rows = [rng.standard_normal(n).astype(np.float32) for n in (2, 3, 1088, 5000)]
    tied = rng.standard_normal(100).astype(np.float32)
    tied[[7, 60]] = tied.max() + 1
    first, last = rows[3].copy(), rows[3].copy()
    first[0], last[-1] = 9.0, 9.0
    inf = rows[2].copy()
    inf[5] = np.inf
    for row in (*rows, tied, first, last, inf):
        assert margin(row) == by_partition(row)
    assert margin(tied) == 0.0
