"""logit_hash: the reply's per-token fingerprint of the logits row it was sampled from."""

from __future__ import annotations

import numpy as np

from engine.lanes.sampling import logit_hash, logit_hashes

MASK = (1 << 64) - 1


def mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def spec_hash(row: np.ndarray) -> str:
    """docs/contract.md `logit_hashes`, in plain integers."""
    words = np.asarray(row, dtype=np.float32).view(np.uint32)
    total = sum(mix((i << 32) | int(w)) for i, w in enumerate(words)) & MASK
    return f"{mix(total ^ len(words)):016x}"


def test_logit_hash_is_the_contract_sum_over_float32_bits() -> None:
    rng = np.random.default_rng(3)
    specials = np.asarray([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -3.5], np.float32)
    for row in (np.linspace(-3, 3, 37, dtype=np.float32), specials, rng.standard_normal(300)):
        want = spec_hash(row)
        assert logit_hash(row) == want and len(want) == 16
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    assert logit_hash(row.astype(np.float64)) == logit_hash(row)  # hashed as float32


def test_the_hash_sees_positions_signs_and_length() -> None:
    """The sum is order-free; the index in each word keeps positions (planted: words
    without their index, red on the swap)."""
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    swapped = row.copy()
    swapped[[2, 30]] = swapped[[30, 2]]
    zero, neg = np.zeros(4, np.float32), np.zeros(4, np.float32)
    neg[1] = -0.0
    assert logit_hash(swapped) != logit_hash(row)
    assert logit_hash(zero) != logit_hash(neg)
    assert logit_hash(zero) != logit_hash(np.zeros(5, np.float32))


def test_one_ulp_changes_the_hash_but_not_the_argmax() -> None:
    row = np.linspace(-3, 3, 37, dtype=np.float32)
    nudged = row.copy()
    nudged[3] = np.nextafter(nudged[3], np.float32(np.inf))
    assert int(np.argmax(row)) == int(np.argmax(nudged))
    assert logit_hash(row) != logit_hash(nudged)
    strided = np.stack([row, row], axis=1)[:, 0]  # not contiguous: same bytes once copied
    assert logit_hash(strided) == logit_hash(row)


def test_logit_hashes_equal_one_by_one() -> None:
    rng = np.random.default_rng(8)
    rows = [rng.standard_normal(40000).astype(np.float32) for _ in range(9)]
    assert logit_hashes(rows) == [logit_hash(r) for r in rows]
    assert logit_hashes([]) == []


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


def test_logit_hash_takes_one_row() -> None:
    import pytest

    with pytest.raises(ValueError, match="one row"):
        logit_hash(np.zeros((2, 3), np.float32))
