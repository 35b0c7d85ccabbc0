"""KV row encodings (bf16, fp8 e4m3 with a per-row power-of-two scale), page storage, and the
memory plan (lanes, the page pool, the prefix cache)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from engine.kv import codec
from engine.kv.plan import PagePlan
from engine.kv.store import KVStore

# ---- codec ---------------------------------------------------------------------------------


def rows(n: int = 64, heads: int = 2, d: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = np.exp2(rng.integers(-20, 20, (n, heads, 1))).astype(np.float32)
    return (rng.standard_normal((n, heads, d)) * scale).astype(np.float32)


@pytest.mark.parametrize("kind", codec.KV_DTYPES)
def test_a_rows_bytes_depend_only_on_that_row(kind: str) -> None:
    x = rows()
    codes, exp = codec.encode(kind, x)
    for r in (0, 1, 17, 63):
        alone, alone_exp = codec.encode(kind, x[r : r + 1])
        assert codes[r].tobytes() == alone[0].tobytes()
        if exp is not None:
            assert exp[r].tobytes() == alone_exp[0].tobytes()
    shuffled = np.random.default_rng(1).permutation(len(x))
    codes2, exp2 = codec.encode(kind, x[shuffled])
    assert codes2.tobytes() == codes[shuffled].tobytes()
    if exp is not None:
        assert exp2.tobytes() == exp[shuffled].tobytes()


@pytest.mark.parametrize("kind", codec.KV_DTYPES)
def test_codes_have_the_kinds_dtype_and_decode_to_float32(kind: str) -> None:
    """The stored dtype is the one code_dtype names (a page store is laid out by it), and
    every kind decodes to float32, never float64."""
    codes, exp = codec.encode(kind, rows())
    assert codes.dtype == codec.code_dtype(kind)
    assert codec.code_dtype(kind).itemsize == {"f32": 4, "bf16": 2, "fp8": 1}[kind]
    assert codec.decode(kind, codes, exp).dtype == np.float32
    assert (exp is None) == (kind != "fp8")


def test_fp8_saturates_an_infinite_value_instead_of_making_nan() -> None:
    """e4m3fn has no infinity: +-inf is clipped to +-448 (times the row's scale)."""
    x = np.ones((1, 1, 8), dtype=np.float32)
    x[0, 0, 1], x[0, 0, 2] = np.inf, -np.inf
    codes, exp = codec.encode("fp8", x)
    back = codec.decode("fp8", codes, exp)[0, 0]
    scale = 2.0 ** int(exp[0, 0])
    assert back[1] == 448 * scale and back[2] == -448 * scale and np.isfinite(back).all()


def test_f32_and_bf16_round_trips() -> None:
    x = rows()
    c, e = codec.encode("f32", x)
    assert e is None and np.array_equal(codec.decode("f32", c, e), x)
    c, e = codec.encode("bf16", x)
    assert e is None and c.dtype == np.dtype(ml_dtypes.bfloat16)
    back = codec.decode("bf16", c, e)
    assert np.array_equal(back, x.astype(ml_dtypes.bfloat16).astype(np.float32))
    c2, _ = codec.encode("bf16", back)  # bf16 values survive exactly
    assert np.array_equal(codec.decode("bf16", c2, None), back)


def test_fp8_scale_is_a_power_of_two_per_row_and_head() -> None:
    x = rows()
    codes, exp = codec.encode("fp8", x)
    assert codes.dtype == np.dtype(ml_dtypes.float8_e4m3fn) and exp.dtype == np.int8
    assert exp.shape == x.shape[:2]
    scaled = np.abs(codes.astype(np.float32))
    assert np.all(scaled.max(axis=-1) <= 256) and np.all(scaled.max(axis=-1) >= 112)
    back = codec.decode("fp8", codes, exp)
    assert np.all(np.isfinite(back))
    # e4m3 has 3 mantissa bits: relative error of the largest entries at most 2^-4
    amax = np.abs(x).max(axis=-1, keepdims=True)
    assert np.all(np.abs(back - x) <= amax * 2.0**-4 + 1e-45)
    # the scale is exactly 2^exp: decoding is codes * 2^exp with no rounding
    manual = codes.astype(np.float64) * np.exp2(exp.astype(np.float64))[..., None]
    assert np.array_equal(back.astype(np.float64), manual)


def test_fp8_extreme_rows_stay_finite_and_keep_their_scale() -> None:
    x = np.zeros((5, 1, 4), np.float32)
    x[0, 0] = [3e38, -1e38, 1.0, 0.0]  # near float32 max
    x[1, 0] = [1e-39, -5e-40, 0.0, 1e-41]  # subnormal float32: the exponent must not wrap
    x[2, 0] = [1e-30, 2e-30, 0.0, 0.0]
    x[3, 0] = 0.0  # an all-zero row
    x[4, 0] = [1000.0, -447.0, 449.0, 480.5]  # past e4m3's range before scaling
    codes, exp = codec.encode("fp8", x)
    back = codec.decode("fp8", codes, exp)
    assert np.all(np.isfinite(back)) and not np.any(np.isnan(codes.astype(np.float32)))
    assert np.array_equal(back[3], x[3])
    for r in (0, 1, 2, 4):
        amax = np.abs(x[r]).max()
        assert np.abs(back[r] - x[r]).max() <= amax * 2.0**-4, (r, back[r], x[r])
        assert np.sign(back[r, 0, 0]) == np.sign(x[r, 0, 0])


# ---- page storage --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", codec.KV_DTYPES)
def test_store_writes_and_reads_rows_across_scattered_pages(kind: str) -> None:
    store = KVStore(layers=2, pages=10, page_rows=4, kv_heads=2, head_dim=8, kind=kind)
    pages = [7, 2, 9, 0]
    k, v = rows(13, 2, 8, seed=3), rows(13, 2, 8, seed=4)
    store.write(1, pages, 0, k[:5], v[:5])  # rows 0..4 (crosses a page)
    store.write(1, pages, 5, k[5:6], v[5:6])  # one decode row
    store.write(1, pages, 6, k[6:], v[6:])  # 6..12 (three pages)
    kr, vr = store.read(1, pages, 13)
    ke, ve = codec.encode(kind, k), codec.encode(kind, v)
    assert np.array_equal(kr, codec.decode(kind, *ke))
    assert np.array_equal(vr, codec.decode(kind, *ve))
    k7, _ = store.read(1, pages, 7)
    assert np.array_equal(k7, kr[:7])
    k0, _ = store.read(0, pages, 13)  # the other layer is untouched
    assert not np.any(k0)
    other = [p for p in range(10) if p not in pages]
    assert not np.any(np.asarray(store.k[1][other], np.float32))


def test_store_bytes() -> None:
    bf16 = KVStore(layers=3, pages=5, page_rows=16, kv_heads=2, head_dim=64, kind="bf16")
    fp8 = KVStore(layers=3, pages=5, page_rows=16, kv_heads=2, head_dim=64, kind="fp8")
    assert bf16.bytes == 2 * 3 * 5 * 16 * 2 * 64 * 2
    assert fp8.bytes == 2 * 3 * (5 * 16 * 2 * 64 + 5 * 16 * 2)


# ---- the memory plan -----------------------------------------------------------------------


def check(plan: PagePlan) -> None:
    """Every page is exactly one of: free, cached (unreferenced), in use."""
    free = plan.free_pages
    assert len(free) == len(set(free))
    cached = {p for p in plan.cache.values() if plan.refs[p] == 0}
    used = {p for p, r in enumerate(plan.refs) if r > 0}
    assert all(r >= 0 for r in plan.refs)
    assert not (set(free) & cached) and not (set(free) & used) and not (cached & used)
    if plan.paging:
        assert len(free) + len(cached) + len(used) == plan.total_pages
    assert set(plan.page_key) == set(plan.cache.values())
    assert plan.unplanned_allocations == 0


def test_paging_off_gives_each_lane_a_fixed_run() -> None:
    plan = PagePlan(lanes=3, context=40, page_rows=16, pool_pages=0)
    assert plan.per_lane == 3 and plan.total_pages == 9 and not plan.paging
    runs = [plan.open(20, list(range(10))) for _ in range(3)]
    assert [r.lane for r in runs] == [0, 1, 2]
    assert [r.pages for r in runs] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(r.reused_rows == 0 for r in runs)
    assert plan.pages_in_use == 9 and not plan.can_open(1)
    plan.release(runs[1], list(range(20)))
    assert plan.pages_in_use == 6 and plan.can_open(40)
    again = plan.open(5, list(range(10)))
    assert again.lane == 1 and again.pages == [3, 4, 5] and again.reused_rows == 0
    for r in (runs[0], runs[2], again):
        plan.release(r, [])
    assert plan.pages_in_use == 0 and plan.cached_pages == 0
    assert plan.free_lanes == [0, 1, 2]
    assert plan.fits(40) and not plan.fits(41)
    check(plan)


def test_paging_on_reserves_the_worst_case_from_a_shared_pool() -> None:
    plan = PagePlan(lanes=4, context=64, page_rows=4, pool_pages=10)
    assert plan.paging and plan.total_pages == 10
    assert plan.fits(40) and not plan.fits(44)
    a = plan.open(17, list(range(3)))  # 5 pages
    assert len(a.pages) == 5 and len(set(a.pages)) == 5
    assert plan.can_open(20) and not plan.can_open(21)
    b = plan.open(20, list(range(100, 103)))
    assert not set(a.pages) & set(b.pages)
    assert plan.pages_in_use == 10 and not plan.can_open(1)
    check(plan)
    plan.release(b, [])
    plan.release(a, [])
    assert plan.pages_in_use == 0 and plan.cached_pages == 0 and len(plan.free_pages) == 10
    check(plan)


def test_prefix_cache_reuses_full_pages_of_a_finished_stream() -> None:
    plan = PagePlan(lanes=2, context=64, page_rows=4, pool_pages=16)
    turn1 = list(range(10, 21))  # 11 tokens
    run = plan.open(16, turn1)
    assert run.reused_rows == 0
    written = turn1 + [50, 51, 52]  # 14 rows written: 3 full pages
    first_pages = run.pages[:3]
    plan.release(run, written)
    assert plan.pages_in_use == 0 and plan.cached_pages == 3
    check(plan)
    turn2 = written + [60, 61, 62, 63, 64]
    run2 = plan.open(24, turn2)
    assert run2.reused_rows == 12 and run2.pages[:3] == first_pages
    assert plan.cached_pages == 0 and plan.pages_in_use == 6
    check(plan)
    # a concurrent stream with the same prefix shares the pages (read only)
    run3 = plan.open(16, written[:9] + [99])
    assert run3.reused_rows == 8 and run3.pages[:2] == first_pages[:2]
    assert plan.refs[first_pages[0]] == 2
    plan.release(run3, written[:9] + [99])
    plan.release(run2, turn2 + [70])
    assert plan.pages_in_use == 0
    check(plan)
    # a different prompt reuses nothing; a prompt of exactly the cached rows keeps one to feed
    assert plan.open(8, [1, 2, 3, 4, 5]).reused_rows == 0
    exact = plan.open(16, written[:12])
    assert exact.reused_rows == 8


def test_prefix_cache_evicts_least_recently_used_pages_when_the_pool_is_short() -> None:
    plan = PagePlan(lanes=1, context=64, page_rows=2, pool_pages=6)
    a = list(range(0, 6))
    plan.release(plan.open(6, a), a)  # 3 cached pages of a
    b = list(range(100, 104))
    plan.release(plan.open(6, b[:3]), b)  # b takes the 3 free pages; 2 cached (page 3 empty)
    check(plan)
    assert plan.cached_pages == 5 and len(plan.free_pages) == 1
    assert plan.can_open(12) and not plan.can_open(13)
    # touch b's prefix so a's pages are the least recently used, then need 4 new pages
    run = plan.open(8, b + [7])
    assert run.reused_rows == 4
    plan.release(run, [])  # wrote nothing new: b's pages stay cached
    check(plan)
    run = plan.open(8, [200, 201, 202])
    assert plan.cached_pages == 2  # only b's two pages are left cached
    plan.release(run, [])
    check(plan)
    assert plan.open(6, b + [1]).reused_rows == 4


def test_a_page_written_twice_is_cached_once() -> None:
    plan = PagePlan(lanes=2, context=32, page_rows=4, pool_pages=8)
    p = list(range(8))
    r1, r2 = plan.open(8, p), plan.open(8, p)
    plan.release(r1, p)
    plan.release(r2, p)
    assert plan.cached_pages == 2 and len(plan.free_pages) == 6
    check(plan)
