"""bench/cupy_bars.py on hand-made tool outputs (no GPU): each bar's figure comes from the
right row, a bar holds only on its side of the target, and a missing figure reads "not run"."""

from __future__ import annotations

import json

from tests.engine.bench_scripts import load_bench

bars = load_bench("cupy_bars")

SPEED = [
    {"engine": "ours (cupy, eager)", "streams": 1, "step_ms": 10.4, "prefill_tok_s": 9.0},
    {"engine": "ours (cupy, graph)", "streams": 1, "replay_ms": 0.99, "prefill_tok_s": 50_337.0},
    {"engine": "transformers static", "streams": 1, "step_ms": 3.3},
    {"engine": "ours (cupy, graph)", "streams": 8, "replay_ms": 1.4, "prefill_tok_s": 49_555.0},
]
BENCH = {"sweep": [{"parallel": 1, "decode_tok_s": 800.0}, {"parallel": 8, "decode_tok_s": 5200.0}]}
MTP = [{"parallel": 1, "ratio_median": 1.66}, {"parallel": 8, "ratio_median": 1.1}]


def test_figures_come_from_the_graph_rows_the_sweep_and_the_medians() -> None:
    got = bars.figures(SPEED, BENCH, MTP)
    assert got == {
        "step_1": 0.99,
        "step_8": 1.4,
        "batching": 6.5,
        "prefill": 49_555.0,  # the lower of the two stream counts
        "mtp_1": 1.66,
        "mtp_8": 1.1,
    }


def test_table_holds_only_on_the_bars_side() -> None:
    rows = bars.table(bars.figures(SPEED, BENCH, MTP), "a GPU").splitlines()[4:]
    held = {row.split(" | ")[0][2:]: row.endswith("| yes |") for row in rows}
    assert held == {
        "decode step, 1 stream (graph replay)": True,  # 0.99 <= 1.0
        "decode step, 8 streams (graph replay)": False,  # 1.4 > 1.2
        "8 / 1 streams, `engine bench` decode tok/s": True,  # 6.5 >= 6.5
        "prefill, 512-token prompt": False,  # 49,555 < 50,000
        "MTP / plain, 1 stream (median)": True,
        "MTP / plain, 8 streams (median)": False,  # 1.1 is not > 1.1
    }


def test_a_missing_figure_is_not_run_and_does_not_hold(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = bars.table(bars.figures([], None, []), "a GPU")
    assert text.count("| not run | no |") == len(bars.BARS)
    mtp = tmp_path / "mtp.jsonl"
    mtp.write_text("  n=1 pair 1/21\n" + json.dumps(MTP[0]) + "\n")
    assert bars._json_lines(str(mtp)) == [MTP[0]]
    assert bars._json_lines(str(tmp_path / "absent")) == []
