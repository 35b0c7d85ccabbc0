"""Which attention form a cupy launch takes (engine/ops/cupy_attend_plan.py), without a GPU:
prompt steps by tiles, decode steps split, the rest a block per pair; and no form asks for
more shared memory than the device gives (an H200, an A100, a 99 KB consumer GPU)."""

from __future__ import annotations

import pytest

from engine.ops.cupy_attend_plan import (
    TAIL_KEYS,
    choose,
    resident,
    shared_asks,
    split_shared,
    tail_fits,
    tail_shared,
    tile_rows,
    tile_shared,
)
from engine.ops.cupy_options import CupyOptions

H200, A100, SMALL = 227 << 10, 163 << 10, 99 << 10
QWEN3_06B = (16, 8, 128)  # q heads, KV heads, head dim


def test_the_default_forms_on_an_h200() -> None:
    opts = CupyOptions()
    hq, hkv, d = QWEN3_06B
    assert choose(512, hq, hkv, d, "bf16", opts, H200).name == "tile"
    assert choose(512, hq, hkv, d, "bf16", opts, H200).rows == 8  # 16 pairs, 2 q heads a KV head
    assert choose(64, hq, hkv, d, "bf16", opts, H200).name == "tile"
    assert choose(63, hq, hkv, d, "bf16", opts, H200).name == "pair"  # 1,008 pairs >= 512
    assert choose(8, hq, hkv, d, "bf16", opts, H200).name == "split"  # a decode step
    assert choose(512, hq, hkv, 256, "bf16", opts, H200).name == "pair"  # D past the staging
    assert choose(512, 32, 1, 128, "bf16", opts, H200).name == "pair"  # 32 q heads a KV head


def test_thread_scores_take_their_kernel_and_the_padded_staging() -> None:
    hq, hkv, d = QWEN3_06B
    plain = choose(512, hq, hkv, d, "bf16", CupyOptions(attend_thread_scores=0), H200)
    ts = choose(512, hq, hkv, d, "bf16", CupyOptions(), H200)  # the default
    assert (plain.kernel, ts.kernel) == ("_tile", "_tile_ts")
    assert ts.shared - plain.shared == 16 * d  # one 16-byte piece after each key's K codes
    assert ts.rows == plain.rows
    assert 2 * (ts.shared + 1024) <= 228 << 10  # two blocks an SM (each keeps 1 KB)
    decode = choose(8, hq, hkv, d, "bf16", CupyOptions(attend_thread_scores=1), H200)
    assert decode.kernel == "_split2"  # decode steps keep their form


def test_split_launches_score_a_key_a_thread_from_padded_rows() -> None:
    """A staged split block (D <= 128) scores a key a thread: its K rows padded by a piece, and
    the most a split kernel is allowed (shared_asks) covers the padded block; at D 256 nothing
    is staged."""
    hq, hkv, d = QWEN3_06B
    form = choose(8, hq, hkv, d, "bf16", CupyOptions(), H200)
    assert (form.kernel, form.thread_scores) == ("_split2", True)
    floats = 2 * (6 * d + 2 * 4) * 4
    assert form.shared == floats + 2 * d * d * 2 + 16 * d  # one piece after each key's K codes
    assert shared_asks("bf16", d, H200)["_split2"] == form.shared
    # its _tail kernel (options.attend_tail): the block and a tail's bytes
    assert shared_asks("bf16", d, H200)["_split2_tail"] == form.shared + tail_shared("bf16", d, 2)
    wide = choose(8, hq, hkv, 256, "bf16", CupyOptions(), H200)
    assert (wide.name, wide.thread_scores, wide.shared) == (
        "split",
        False,
        split_shared("bf16", 256),
    )
    assert split_shared("bf16", 256) == (6 * 256 + 2 * 4) * 4  # D 256: no staging


def test_knobs_turn_forms_off() -> None:
    hq, hkv, d = QWEN3_06B
    no_tile = CupyOptions(attend_tile=0)
    assert choose(512, hq, hkv, d, "bf16", no_tile, H200).name == "pair"
    no_split = CupyOptions(attend_split=0)
    assert choose(8, hq, hkv, d, "bf16", no_split, H200).name == "pair"
    every = CupyOptions(attend_tile=1)
    assert choose(1, hq, hkv, d, "fp8", every, H200).name == "tile"


@pytest.mark.parametrize("limit", [H200, A100, SMALL])
@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_no_form_asks_for_more_shared_memory_than_the_device_has(limit, kind) -> None:  # type: ignore[no-untyped-def]
    opts = CupyOptions(attend_tile=1, attend_split=10**6)
    for d in (32, 64, 128, 256):
        for n, hq, hkv in ((1, 16, 8), (8, 16, 8), (512, 16, 8), (64, 12, 4), (70, 24, 2)):
            form = choose(n, hq, hkv, d, kind, opts, limit)
            assert form.shared <= limit, (limit, kind, d, n, hq, hkv, form)


def test_tiles_shrink_to_fit_and_split_steps_aside() -> None:
    opts = CupyOptions()
    hq, hkv, d = QWEN3_06B
    assert tile_shared("f32", d, 16, 8) > A100  # the f32 tile of 16 pairs: 178 KB
    assert tile_rows(512, hq, hkv, d, "f32", opts, A100) == 4
    assert tile_rows(512, hq, hkv, d, "bf16", opts, SMALL) == 4
    assert tile_rows(512, hq, hkv, d, "f32", opts, SMALL) == 0  # its staged codes alone: 128 KB
    assert split_shared("f32", d) > SMALL
    assert choose(8, hq, hkv, d, "f32", opts, SMALL).name == "pair"
    assert choose(8, hq, hkv, d, "bf16", opts, SMALL).name == "split"


def test_split_blocks_take_the_q_heads_of_one_kv_head() -> None:
    """From 128 pairs on, a split block takes 4 or 2 q heads of one KV head where they
    divide its q heads and fit; 1 below, past the staged head dims, where the knobs say so,
    or where nothing divides."""
    opts = CupyOptions()
    hq, hkv, d = QWEN3_06B
    form = choose(8, hq, hkv, d, "bf16", opts, H200)  # 8 streams: 128 pairs
    assert (form.name, form.heads, form.kernel) == ("split", 2, "_split2")
    assert form.shared == split_shared("bf16", d, 2)
    one_stream = choose(1, hq, hkv, d, "bf16", opts, H200)  # 16 pairs: a head a block
    assert (one_stream.name, one_stream.kernel) == ("split", "_split")
    assert choose(7, hq, hkv, d, "bf16", opts, H200).heads == 1  # 112 pairs
    assert choose(4, 32, 8, d, "bf16", opts, H200).heads == 4  # 4 q heads a KV head
    assert choose(2, 64, 8, d, "bf16", opts, H200).heads == 4  # 8: two blocks of 4
    assert choose(8, 24, 4, d, "bf16", opts, H200).heads == 2  # 6: three blocks of 2
    assert choose(16, 12, 4, d, "bf16", opts, H200).heads == 1  # 3: nothing divides
    assert choose(16, 8, 8, d, "bf16", opts, H200).heads == 1  # no grouped query
    assert choose(8, hq, hkv, 256, "bf16", opts, H200).kernel == "_split"  # D past staging
    one = CupyOptions(attend_split_heads=1)
    assert choose(8, 32, 8, d, "bf16", one, H200).kernel == "_split"
    two = CupyOptions(attend_split_heads=2)
    assert choose(8, 32, 8, d, "bf16", two, H200).heads == 2
    always = CupyOptions(attend_heads_from=0)
    assert choose(1, hq, hkv, d, "bf16", always, H200).heads == 2
    assert choose(512, hq, hkv, d, "bf16", opts, H200).kernel == "_tile_ts"
    assert choose(63, hq, hkv, d, "bf16", opts, H200).kernel == ""


def test_the_plan_counts_the_kernels_groups() -> None:
    """GROUPS is cupy_kernels.cu's ATT_NG (the split form's parts and merge areas)."""
    import re
    from pathlib import Path

    from engine.ops import cupy_attend_plan

    src = (Path(cupy_attend_plan.__file__).parent / "cupy_kernels.cu").read_text()
    found = re.search(r"#define ATT_NG (\d+)", src)
    assert found and int(found.group(1)) == cupy_attend_plan.GROUPS


H100 = (132, 228 << 10, 227 << 10)  # multiprocessors, shared bytes an SM, a block at most


def test_a_tail_is_taken_where_every_block_stays_resident() -> None:
    """options.attend_tail: a split launch takes tails (TAIL_KEYS more keys staged a block)
    where all its blocks fit the device at once with them: 8 streams of the 0.6B shape (256
    blocks of two heads, 92 KB: two an SM) and 1 stream (32 blocks); not 16 rows (512
    blocks, which fit three an SM without the tail), nor an f32 launch past one block an SM,
    nor a form that stages nothing (D 256, the pair and tile forms)."""
    hq, hkv, d = QWEN3_06B
    opts = CupyOptions(attend_tail=1)
    eight = choose(8, hq, hkv, d, "bf16", opts, H200)
    assert eight.shared + tail_shared("bf16", d, 2) == 92_352
    assert tail_fits(eight, 8 * hkv * 4, "bf16", d, H100)
    one = choose(1, hq, hkv, d, "bf16", opts, H200)
    assert tail_fits(one, hq * 4, "bf16", d, H100)
    sixteen = choose(16, hq, hkv, d, "bf16", opts, H200)
    assert sixteen.heads == 2 and not tail_fits(sixteen, 16 * hkv * 4, "bf16", d, H100)
    assert 3 * (sixteen.shared + 1024) <= H100[1]  # what the tail would cost it
    f32 = choose(8, hq, hkv, d, "f32", opts, H200)
    assert not tail_fits(f32, 8 * hkv * 4, "f32", d, H100)  # 256 blocks, one an SM
    assert tail_fits(f32, 100, "f32", d, H100)
    assert not tail_fits(f32, 100, "f32", d, (132, 228 << 10, f32.shared))  # no room a block
    wide = choose(8, hq, hkv, 256, "bf16", opts, H200)
    assert wide.name == "split" and not tail_fits(wide, 8, "bf16", 256, H100)
    for n in (512, 63):
        assert not tail_fits(choose(n, hq, hkv, d, "bf16", opts, H200), 1, "bf16", d, H100)
    assert not tail_fits(one, 1, "bf16", d, (0, 0, 0))  # a device not read
    # with the kernel's registers: bf16, four heads a block (512 threads of 78 registers:
    # 40 K of the 64 K) holds one block an SM, not the two its shared memory would allow
    four = choose(4, 32, 8, d, "bf16", opts, H200)
    assert four.heads == 4 and tail_fits(four, 2 * 132, "bf16", d, H100)
    assert not tail_fits(four, 2 * 132, "bf16", d, H100, regs=78)
    assert tail_fits(four, 132, "bf16", d, H100, regs=78)


def test_residency_counts_shared_memory_threads_registers_and_the_cap() -> None:
    sm = 228 << 10
    assert resident(92_352, 256, 0, sm) == 2  # shared memory: 2 x 93,376 <= 233,472
    assert resident(92_352, 256, 81, sm) == 2  # 8 warps x 2,816 registers: 2 of 2.9
    assert resident(92_352, 256, 128, sm) == 2  # 8 x 4,096: exactly 2
    assert resident(92_352, 256, 129, sm) == 1  # rounded up to 136 a thread: 1.9
    assert resident(10_000, 1024, 0, sm) == 2  # threads: 2,048 an SM
    assert resident(100, 32, 8, sm) == 32  # the blocks cap


@pytest.mark.parametrize("kind", ["f32", "bf16", "fp8"])
def test_the_tail_area_is_what_the_kernel_lays_out(kind) -> None:  # type: ignore[no-untyped-def]
    """tail_shared: the tail's K rows (padded) and V rows, then per slot TAIL_KEYS weights
    and D tree values, then the keys' two exponents and rows (cupy_attend.cu's kst_t ..
    rows_t); TAIL_KEYS is the kernel's ATT_TAILK."""
    import re
    from pathlib import Path

    from engine.ops import cupy_attend_plan

    src = (Path(cupy_attend_plan.__file__).parent / "cupy_attend_stage.cu").read_text()
    found = re.search(r"#define ATT_TAILK (\d+)", src)
    assert found and int(found.group(1)) == TAIL_KEYS
    d, heads = 128, 2
    pieces = {"f32": 32, "bf16": 16, "fp8": 8}[kind]
    codes = TAIL_KEYS * ((pieces + 1) + pieces) * 16
    assert tail_shared(kind, d, heads) == codes + (heads * (TAIL_KEYS + d) + 3 * TAIL_KEYS) * 4
