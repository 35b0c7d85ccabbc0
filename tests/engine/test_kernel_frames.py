"""bench/kernel_frames.py's reading of ptxas -v reports (no NVRTC needed): each entry's
registers, stack frame and spills, a device function's properties not taken for an entry's,
and the table's filters and base column."""

from __future__ import annotations

from tests.engine.bench_scripts import load_bench

tool = load_bench("kernel_frames")

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'attend_bf16_128_split' for 'sm_90'
ptxas info    : Function properties for attend_bf16_128_split
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 95 registers, used 1 barriers, 128 bytes cumulative stack size
ptxas info    : Compiling entry function 'attend_fp8_128_tile' for 'sm_90'
ptxas info    : Function properties for attend_fp8_128_tile
ptxas         .     80 bytes stack frame, 96 bytes spill stores, 280 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 80 bytes cumulative stack size
ptxas info    : Compiling entry function 'mma_gemm_1' for 'sm_90'
ptxas info    : Function properties for mma_gemm_1
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 96 registers, used 1 barriers
"""


def test_frames_reads_each_entry() -> None:
    got = tool.frames(LOG)
    assert got == {
        "attend_bf16_128_split": tool.Frame(95, 128, 0, 0),
        "attend_fp8_128_tile": tool.Frame(128, 80, 96, 280),
        "mma_gemm_1": tool.Frame(96, 0, 0, 0),
    }


def test_an_entry_without_a_frame_line_reads_no_frame() -> None:
    """ptxas leaves the properties line out for some entries: the entry before must not lend
    it its frame."""
    log = LOG.replace(
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n", ""
    )
    assert tool.frames(log)["mma_gemm_1"] == tool.Frame(96, 0, 0, 0)


def test_report_filters_and_compares_with_the_base() -> None:
    head = tool.frames(LOG)
    base = {**head, "attend_bf16_128_split": tool.Frame(101, 256, 0, 0)}
    del base["mma_gemm_1"]
    rows = tool.report(head, base, "", frames_only=True).splitlines()[2:]
    assert [r.split(" | ")[0][2:] for r in rows] == ["attend_bf16_128_split", "attend_fp8_128_tile"]
    assert rows[0].endswith("| 101 registers, 256 frame, 0/0 spills |")
    assert rows[1].endswith("| same |")
    everything = tool.report(head, base, "mma", frames_only=False).splitlines()[2:]
    assert everything == ["| mma_gemm_1 | 96 | 0 | 0 | 0 | new |"]
