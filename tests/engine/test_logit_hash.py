"""logit_hash: the reply's per-token fingerprint of the logits row it was sampled from."""

from __future__ import annotations

import numpy as np

from engine.lanes.sampling import logit_hash, logit_hashes, row_hashes

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
    """Large host rows on the pool (made afresh here, as in a new process) hash as one by one."""
    from engine.lanes import sampling

    sampling._POOL = None
    rng = np.random.default_rng(8)
    rows = [rng.standard_normal(40000).astype(np.float32) for _ in range(9)]
    assert logit_hashes(rows) == [logit_hash(r) for r in rows]
    assert logit_hashes([]) == []
    assert sampling._POOL is not None  # nine rows of 160 KB went to the pool
    assert sampling._pool() is sampling._pool()  # one pool a process, not one a call


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


class OnDevice:
    """Rows that stay on a device: hashes() and greedy() answer there; reading them to the
    host is an error here."""

    def __init__(self, words: list[int], ids: list[int] = (), margins: list[float] = ()) -> None:
        self.words = np.asarray(words, dtype=np.uint64)
        self.ids, self.margins = np.asarray(ids, np.int64), np.asarray(margins, np.float32)

    def hashes(self) -> np.ndarray:
        return self.words

    def greedy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ids, self.margins

    def __array__(self, *args: object, **kwargs: object) -> np.ndarray:
        raise AssertionError("a device row was read to the host")


def test_a_row_on_the_device_is_hashed_there() -> None:
    import pytest

    assert logit_hash(OnDevice([0x1234])) == "0000000000001234"
    assert logit_hashes([OnDevice([1]), OnDevice([0xFFFFFFFFFFFFFFFF])]) == [
        "0000000000000001",
        "ffffffffffffffff",
    ]
    with pytest.raises(ValueError, match="one row, got 2"):
        logit_hash(OnDevice([1, 2]))


def test_device_greedy_takes_the_devices_picks_and_leaves_host_rows() -> None:
    from engine.lanes.sampling import device_greedy

    ids, margins = device_greedy(OnDevice([], ids=[7, 0], margins=[0.5, 0.0]))
    assert (ids, margins) == ([7, 0], [0.5, 0.0])
    assert all(type(i) is int for i in ids) and all(type(m) is float for m in margins)
    assert device_greedy(np.zeros((2, 3), np.float32)) is None


def test_rows_hash_as_float32_whatever_their_type_or_shape() -> None:
    from engine.lanes.sampling import margin, row_hash_words

    rng = np.random.default_rng(12)
    rows = rng.standard_normal((3, 50)).astype(np.float32)
    assert list(row_hash_words(rows.astype(np.float64))) == list(row_hash_words(rows))
    assert list(row_hash_words(np.asfortranarray(rows))) == list(row_hash_words(rows))
    assert margin(rows[1][None, :]) == margin(rows[1])


def test_row_hashes_equal_one_by_one() -> None:
    """A round's first n rows hashed at once == logit_hash of each: small host rows in one
    pass, large ones on the pool, device rows from their kernel's words; none past n."""
    rng = np.random.default_rng(12)
    for vocab in (7, 1088, 40000):
        logits = rng.standard_normal((5, vocab)).astype(np.float32)
        for n in range(6):
            assert row_hashes(logits, n) == [logit_hash(r) for r in logits[:n]], (vocab, n)
    assert row_hashes(OnDevice([5, 6, 7]), 2) == ["0000000000000005", "0000000000000006"]
    assert row_hashes(np.zeros((0, 4), dtype=np.float32), 0) == []
