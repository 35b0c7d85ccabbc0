"""Exact sampling on its edges: temperature 0, ties, seeds past 32 and 64 bits, positions."""

from __future__ import annotations

import numpy as np
import pytest

from engine.lanes.sampling import margin, sample, uniforms


def test_greedy_is_argmax_with_ties_to_the_lowest_id_at_zero_and_below() -> None:
    row = np.array([0.5, 2.0, -1.0, 2.0], dtype=np.float32)
    for t in (0.0, -1.0):
        assert sample(row, t, seed=123, position=9) == 1


def test_any_positive_temperature_samples() -> None:
    row = np.zeros(64, dtype=np.float32)
    got = {sample(row, 1e-3, seed=s, position=0) for s in range(40)}
    assert len(got) > 10  # flat logits: the noise decides, not argmax (which would be 0)


def test_uniforms_are_open_unit_and_a_pure_function() -> None:
    u = uniforms(7, 3, 4096)
    assert u.dtype == np.float64 and u.shape == (4096,)
    assert u.min() > 0.0 and u.max() < 1.0
    assert np.array_equal(u, uniforms(7, 3, 4096))
    assert np.array_equal(uniforms(7, 3, 10), u[:10])  # a token's draw ignores the vocab size
    assert not np.array_equal(u, uniforms(7, 4, 4096))
    assert not np.array_equal(u, uniforms(8, 3, 4096))


@pytest.mark.parametrize("seed", [2**32, 2**32 + 1, 2**63 + 5, 2**64 - 1])
def test_seeds_past_32_bits_are_their_own(seed: int) -> None:
    """A seed is taken mod 2**64: 2**32 + k is not k, and 2**64 + k is k."""
    low = seed & 0xFFFFFFFF
    assert not np.array_equal(uniforms(seed, 0, 256), uniforms(low, 0, 256))
    assert np.array_equal(uniforms(seed + 2**64, 0, 256), uniforms(seed, 0, 256))


def test_the_draw_is_gumbel_max_over_scaled_logits() -> None:
    rng = np.random.default_rng(0)
    row = rng.standard_normal(500).astype(np.float32)
    for t, seed, pos in [(0.7, 1, 0), (1.0, 2**40, 17), (2.5, 3, 1000)]:
        u = uniforms(seed, pos, 500)
        want = int(np.argmax(row.astype(np.float64) / t - np.log(-np.log(u))))
        assert sample(row, t, seed, pos) == want


def test_margin_is_top1_minus_top2_and_zero_on_a_tie() -> None:
    assert margin(np.array([1.0, 4.0, 2.5], dtype=np.float32)) == 1.5
    assert margin(np.array([3.0, 1.0, 3.0], dtype=np.float32)) == 0.0
    assert margin(np.array([-2.0, -5.0], dtype=np.float32)) == 3.0


M64 = (1 << 64) - 1
GOLD = 0x9E3779B97F4A7C15


def splitmix_finalizer(x: int) -> int:
    """splitmix64's finalizer in Python integers (mod 2**64), from its published constants."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def reference_uniform(seed: int, position: int, token: int) -> float:
    key = splitmix_finalizer(((seed & M64) * GOLD + position) & M64)
    bits = splitmix_finalizer((key + token * GOLD) & M64)
    return ((bits >> 11) + 0.5) / 2**53


@pytest.mark.parametrize("seed,position", [(0, 0), (7, 3), (2**32 + 1, 99), (2**64 - 1, 4095)])
def test_uniforms_are_the_documented_counter_hash(seed: int, position: int) -> None:
    """The draws are part of the contract (a seed's tokens must not move between versions):
    equal, bit for bit, to the hash the module docstring names, computed independently."""
    got = uniforms(seed, position, 300)
    want = np.array([reference_uniform(seed, position, t) for t in range(300)])
    assert got.tobytes() == want.tobytes()


def test_uint64_wrap_around_warns_nowhere() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uniforms(2**64 - 1, 2**40, 64)
        sample(np.zeros(64, dtype=np.float32), 1.0, 2**63 + 1, 7)
