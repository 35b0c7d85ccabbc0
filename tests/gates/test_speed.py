"""Speed gates: paired statistics and verdicts on synthetic blocks, the schema, the receipt.

No timing here: every sample is made up."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from gates import BadInput
from gates.judge.kinds import KINDS
from gates.judge.results import GateResult
from gates.plan import matrix
from gates.plan.speed import SpeedSpec
from gates.report import speed_chart as chart
from gates.report.receipt import render
from gates.report.view import Manifest
from gates.run.results import Status
from gates.run.speed import estimate, schema, stats
from gates.run.speed.measure import judge, max_looks
from gates.run.speed.results import Sample, SpeedRun, Verdict

BETTER = {m: v.better for m, v in schema.METRICS.items()}
ROOT = Path(__file__).resolve().parents[2]


def _pairs(seed: int, n: int, shift: float, noise: float, drift: float = 0.0):
    """Per block a base and a head value: a drift both share, then each its own noise."""
    rng = np.random.default_rng(seed)
    common = 2e-3 * np.exp(drift * rng.standard_normal(n))
    base = common * np.exp(noise * rng.standard_normal(n))
    head = common * shift * np.exp(noise * rng.standard_normal(n))
    return list(base), list(head)


def _verdict(base, head, metric="decode_cpu_s_per_token", **kw):
    opts = {"alpha": 0.05, "looks": 1, "delta": 0.05, "min_effect": 0.02, **kw}
    (c,) = stats.verdicts({(metric, 1): (base, head)}, BETTER, **opts)
    return c


def test_clear_cpu_shift_is_slower():
    base, head = _pairs(1, 12, 1.05, 0.01)  # 5 % more CPU per token
    c = _verdict(base, head)
    assert c.verdict is Verdict.SLOWER
    assert 0.94 < c.speed < 0.97 and 1.03 < c.ratio < 1.06
    assert c.speed_hi < 1 and c.p_holm < 0.001
    # the same shift on a rate (higher is better) reads the same way
    rates = _verdict([1 / x for x in base], [1 / x for x in head], metric="decode_tok_s")
    assert rates.verdict is Verdict.SLOWER and math.isclose(rates.speed, c.speed, rel_tol=1e-9)


def test_pairing_cancels_the_machines_drift():
    # 30 % drift from block to block, shared by both sides of a block, hides nothing:
    # an unpaired test of these values (red once with the per-side medians compared
    # instead of per-block ratios) calls this inconclusive
    base, head = _pairs(2, 12, 1.05, 0.01, drift=0.3)
    assert _verdict(base, head).verdict is Verdict.SLOWER
    same = _verdict(*_pairs(3, 12, 1.0, 0.01, drift=0.3))
    assert same.verdict is Verdict.EQUIVALENT


def test_faster_and_equivalent():
    assert _verdict(*_pairs(4, 12, 0.9, 0.01)).verdict is Verdict.FASTER
    same = _verdict(*_pairs(5, 12, 1.0, 0.01))
    assert same.verdict is Verdict.EQUIVALENT
    assert 0.95 <= same.speed_lo <= same.speed_hi <= 1.05


def test_identical_distributions_are_not_slower():
    # a single cell at alpha 0.05 can alarm; the gate's 16 cells of one run share alpha
    # (Holm) and its looks, so a run of 16 no-op cells alarms in at most ~5 % of runs
    runs = []
    for s in range(40):
        cells = {
            ("decode_cpu_s_per_token", n): _pairs(100_000 + 1000 * s + n, 12, 1.0, 0.05)
            for n in range(16)
        }
        got = stats.verdicts(cells, BETTER, alpha=0.05, looks=3, delta=0.05, min_effect=0.02)
        runs.append(any(c.verdict is Verdict.SLOWER for c in got))
    assert sum(runs) <= 1


def test_noisy_is_inconclusive():
    c = _verdict(*_pairs(7, 6, 0.95, 0.3))
    assert c.verdict is Verdict.INCONCLUSIVE
    assert any("spread" in u for u in c.unstable)


def test_few_blocks_give_no_interval():
    c = _verdict(*_pairs(8, 2, 1.5, 0.001))
    assert math.isnan(c.speed_lo) and c.verdict is Verdict.INCONCLUSIVE


def test_small_shift_needs_min_effect():
    c = _verdict(*_pairs(9, 24, 1.01, 0.002))  # significant, but 1 %
    assert c.p < 1e-4 and c.verdict is Verdict.EQUIVALENT


def test_holm_and_looks():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5]) == [0.5]
    # a shift significant alone is not once many cells share alpha and looks
    base, head = _pairs(11, 8, 1.04, 0.02)
    alone = _verdict(base, head)
    cells = {("decode_cpu_s_per_token", n): (base, head) for n in range(1, 17)}
    many = stats.verdicts(cells, BETTER, alpha=0.05, looks=4, delta=0.05, min_effect=0.02)
    assert alone.p_holm < many[0].p_holm
    assert many[0].level == pytest.approx(0.0125)
    spec = SpeedSpec(blocks=12, add_blocks=6, max_blocks=36)
    assert max_looks(spec) == 5
    assert max_looks(dataclasses.replace(spec, add_blocks=0)) == 1


def test_outliers_flag_unstable():
    xs = [0.0, 0.01, -0.01, 0.0, 0.02, -0.02, 0.0, 1.0]
    assert stats.outliers(xs) == 1
    base = [1.0] * 8
    c = _verdict(base, [math.exp(-x) for x in xs])
    assert c.unstable == ["1 outlier blocks of 8"]
    # one odd block among twenty is the machine, not an unstable cell
    xs = [0.0, 0.01, -0.01, 0.0, 0.02] * 4
    c = _verdict([1.0] * 21, [math.exp(-x) for x in [*xs, 1.0]])
    assert c.unstable == []


def _line(n: int, round_cpu: list[float]) -> dict:
    """A timed run's line as engine bench printed it."""
    k = len(round_cpu)
    acts = {"kind": ["short"] + ["round"] * k, "cpu_s": [0.01, *round_cpu]}
    acts.update(wall_s=acts["cpu_s"], rows=[64] + [n] * k, tokens=[n] + [n] * k)
    return {"parallel": n, "ttft_ms": 5.0, "cpu_s_per_token": 0.01, "actions": acts}


def _run(n: int, round_cpu: list[float]) -> schema.TimedRun:
    return schema.TimedRun.parse(_line(n, round_cpu), n, [])


def test_estimate_takes_a_quantile_of_actions():
    # one round slowed 10x by a neighbour moves the mean, not the median
    runs = [_run(2, [2e-3, 2e-3, 2e-3]), _run(2, [2e-3, 2e-2, 2e-3])]
    assert estimate.value(runs, "decode_cpu_s_per_token", 0.5) == pytest.approx(1e-3)
    assert estimate.value(runs, "decode_tok_s", 0.5) == pytest.approx(1000.0)
    assert estimate.value(runs, "prefill_cpu_s_per_token", 0.5) == pytest.approx(0.01 / 64)
    assert estimate.value(runs, "ttft_ms", 0.5) == 5.0
    assert math.isnan(estimate.value([_run(1, [])], "decode_cpu_s_per_token", 0.5))


def test_schema_checks():
    assert schema.Header.parse({"bench_schema": 2, "ready": True}).version == 2
    for bad, why in (
        ({"ready": True}, "no bench_schema"),
        ({"bench_schema": 1}, "no --lockstep"),
        ({"bench_schema": 3}, "newer"),
        ({"bench_schema": "2"}, "not a version"),
    ):
        with pytest.raises(schema.NotComparable, match=why):
            schema.Header.parse(bad)
    ok = _line(2, [1e-3])
    got = schema.TimedRun.parse(ok, 2, ["ttft_ms"])
    assert got.parallel == 2 and got.actions is not None and got.actions.rows == (64, 2)
    assert got.to_json() == {"side": "", "parallel": 2, "cpu_s_per_token": 0.01, "ttft_ms": 5.0}
    with pytest.raises(schema.NotComparable, match="parallel 2 for 4"):
        schema.TimedRun.parse(ok, 4, [])
    with pytest.raises(schema.NotComparable, match="no positive cpu_s_per_token"):
        schema.TimedRun.parse({**ok, "cpu_s_per_token": 0}, 2, ["cpu_s_per_token"])
    with pytest.raises(schema.NotComparable, match="actions"):
        schema.TimedRun.parse({**ok, "actions": {"kind": []}}, 2, [])
    with pytest.raises(schema.NotComparable, match="differ in length"):
        schema.TimedRun.parse({**ok, "actions": {**ok["actions"], "rows": []}}, 2, [])


def _speed_result(shift: float) -> SpeedRun:
    spec = SpeedSpec(metrics=("decode_cpu_s_per_token", "decode_tok_s"), parallel=(1, 2, 4, 8))
    samples = []
    for b in range(12):
        values = {}
        for n in spec.parallel:
            wobble = 1 + 0.001 * (b % 5)
            values[f"decode_cpu_s_per_token@{n}"] = [2e-3 * wobble, 2e-3 * shift * wobble]
            values[f"decode_tok_s@{n}"] = [300.0 * n * wobble, 300.0 * n / shift * wobble]
        samples.append(Sample(b, 2, values, 1.0, None, None, []))
    cells = judge(samples, spec, looks=1)
    slower = any(c.verdict is Verdict.SLOWER for c in cells)
    return SpeedRun(
        Status.FAIL if slower else Status.PASS,
        cells=cells,
        samples=samples,
        spec=spec,
        blocks=12,
        looks=1,
        level=0.05,
        wall_s=60.0,
        cpu=1,
    )


def test_receipt_table_and_chart():
    sp = _speed_result(1.05)
    assert {c.verdict for c in sp.cells} == {Verdict.SLOWER}
    table = chart.table(sp)
    assert (
        "decode CPU per token (ms) at 1 stream" in table and "decode (tok/s) at 8 streams" in table
    )
    assert "❌ slower" in table and "95% CI" in table
    mermaid = chart.sweep_chart(sp)
    assert mermaid.startswith("```mermaid\nxychart-beta")
    assert 'x-axis "streams" [1, 2, 4, 8]' in mermaid
    assert "line [300.4, 600.9, 1202, 2404]" in mermaid  # medians over blocks
    assert chart.summary_line(sp) == "8 cells: 8 slower"
    assert chart.table(SpeedRun(Status.PASS)) == "" and chart.sweep_chart(None) == ""
    back = SpeedRun.from_json(json.loads(json.dumps(sp.to_json())))
    assert chart.table(back) == table and back.cells[0].verdict is Verdict.SLOWER


def test_speed_verdict_exit_codes():
    gate = GateResult("g", "across_commits", Status.PASS, 1, 1)
    man = {"gates": [gate], "arms": [], "speed": _speed_result(1.05).to_json()}
    assert render.verdict(Manifest.parse(man)) == ("❌ 1 gate failed: speed", 1)
    ok = _speed_result(1.0)
    ok.cells[0].verdict = Verdict.INCONCLUSIVE
    man["speed"] = ok.to_json()
    assert render.verdict(Manifest.parse(man))[1] == 0
    assert "1 inconclusive" in render.summary(
        Manifest.parse(
            {
                **man,
                "verdict": "v",
                "exit_code": 0,
                "head": {"sha": "h" * 40},
                "base": {"sha": "b" * 40},
            }
        )
    )


def test_matrix_speed_block(tmp_path):
    p = tmp_path / "m.yaml"
    head = "model: m\nprompts: p\ngates:\n  - name: g\n    across_commits: {}\n"
    p.write_text(head + "speed: {runs: 5, max_ratio_drop: 0.1}\n")
    sp = matrix.load(p, KINDS).speed
    assert sp is not None and sp.blocks == 3 and sp.delta == 0.1 and "runs" not in sp.to_json()
    p.write_text(head + "speed: {metrics: [decode_tok_s, joules]}\n")
    with pytest.raises(BadInput, match="speed.metrics"):
        matrix.load(p, KINDS)
    p.write_text(head + "speed: {alpha: 1.5}\n")
    with pytest.raises(BadInput, match="speed.alpha"):
        matrix.load(p, KINDS)
    p.write_text(head + "speed: {quantile: 1.0}\n")
    with pytest.raises(BadInput, match="speed.quantile"):
        matrix.load(p, KINDS)


def test_a_loss_past_the_tolerance_is_slower_small_never_equivalent():
    # quick's look at a real 4 % decode loss: speed 0.966, interval 0.956-0.975, p 0.002
    # (Holm 0.008 over 4 cells, level 0.005): under a 10 % band it read "equivalent"
    c = stats.cell("decode_cpu_s_per_token", 1, [1.0] * 3, [1.0] * 3, "lower")
    c.speed, c.speed_lo, c.speed_hi, c.p, c.p_holm = 0.966, 0.956, 0.975, 0.002, 0.008
    assert stats.decide(c, 0.005, 0.10, 0.05) is Verdict.EQUIVALENT  # the old quick band
    quick = matrix.load(ROOT / "matrices" / "quick.yaml", KINDS).speed
    assert quick is not None and quick.delta <= 0.03
    got = stats.decide(c, 0.005, quick.delta, quick.min_effect)
    assert got is Verdict.SLOWER_SMALL and str(got) == "slower (small)"
    assert chart.ICON[got] == "⚠️ slower (small)"
    assert stats.decide(c, 0.01, quick.delta, 0.03) is Verdict.SLOWER  # past min_effect
    c.speed, c.speed_lo, c.speed_hi = 1 / 0.966, 1 / 0.975, 1 / 0.956
    assert str(stats.decide(c, 0.005, 0.03, 0.05)) == "faster (small)"


def test_equivalent_only_inside_the_tolerance():
    for s in range(30):
        shift = 1 + 0.002 * (s - 15)  # -3 % .. +3 % more CPU per token
        c = _verdict(*_pairs(500 + s, 12, shift, 0.01), delta=0.03, min_effect=0.05)
        if c.verdict is Verdict.EQUIVALENT:
            assert 0.97 <= c.speed_lo <= c.speed_hi <= 1.03
        if c.speed_hi < 1 and 0.95 <= c.speed < 0.97:
            assert c.verdict is Verdict.SLOWER_SMALL, c
    small = _verdict(*_pairs(77, 12, 1.035, 0.005), delta=0.03, min_effect=0.05)
    assert small.verdict is Verdict.SLOWER_SMALL  # 3.5 % more CPU: reported, does not fail
