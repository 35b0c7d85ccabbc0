"""Speed gates: statistics and verdicts on synthetic samples, the bench schema, the receipt.

No timing here: every sample is made up."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gates import BadInput, matrix
from gates.receipt import render
from gates.results import GateResult, Status
from gates.speed import chart, schema, stats
from gates.speed.measure import judge, max_looks

BETTER = {m: v.better for m, v in schema.METRICS.items()}


def _draw(seed: int, n: int, centre: float, spread: float) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(centre * np.exp(spread * rng.standard_normal(n)))


def _verdict(base, head, metric="cpu_s_per_token", **kw):
    opts = {"alpha": 0.05, "looks": 1, "delta": 0.05, "min_effect": 0.02, **kw}
    (c,) = stats.verdicts({(metric, 1): (base, head)}, BETTER, **opts)
    return c


def test_clear_cpu_shift_is_slower():
    base = _draw(1, 24, 2.0e-3, 0.01)
    head = [x * 1.05 for x in _draw(2, 24, 2.0e-3, 0.01)]  # 5 % more CPU per token
    c = _verdict(base, head)
    assert c["verdict"] == "slower"
    assert c["ratio"] > 1.03 and c["speed"] < 0.97
    assert c["speed_hi"] < 1 and c["p_holm"] < 0.001
    # the same shift on a rate (higher is better) reads the same way
    rates = _verdict([1 / x for x in base], [1 / x for x in head], metric="decode_tok_s")
    assert rates["verdict"] == "slower" and math.isclose(rates["speed"], c["speed"], rel_tol=1e-3)


def test_faster_and_equivalent():
    base = _draw(3, 24, 2.0e-3, 0.01)
    assert _verdict(base, [x * 0.9 for x in _draw(4, 24, 2.0e-3, 0.01)])["verdict"] == "faster"
    same = _verdict(base, _draw(5, 24, 2.0e-3, 0.01))
    assert same["verdict"] == "equivalent"
    assert 0.95 <= same["speed_lo"] <= same["speed_hi"] <= 1.05


def test_identical_distributions_are_not_slower():
    one = _verdict(_draw(100, 16, 1.0, 0.05), _draw(101, 16, 1.0, 0.05))
    assert one["verdict"] != "slower"
    # a single cell at alpha 0.05 can alarm (about 1 time in 40, the slower side); the
    # gate's 16 cells of one run share alpha (Holm), so a run of 16 no-op cells does not
    runs = []
    for s in range(40):
        cells = {
            ("cpu_s_per_token", n): (
                _draw(100_000 + 1000 * s + n, 16, 1.0, 0.05),
                _draw(200_000 + 1000 * s + n, 16, 1.0, 0.05),
            )
            for n in range(16)
        }
        got = stats.verdicts(cells, BETTER, alpha=0.05, looks=4, delta=0.05, min_effect=0.02)
        runs.append(any(c["verdict"] == "slower" for c in got))
    assert sum(runs) <= 1  # family-wise rate <= 0.05 -> at most ~2 of 40; these seeds: 0 or 1


def test_noisy_is_inconclusive():
    c = _verdict(_draw(7, 6, 1.0, 0.3), _draw(8, 6, 0.95, 0.3))
    assert c["verdict"] == "inconclusive"
    assert any("spread" in u for u in c["unstable"])


def test_small_shift_needs_min_effect():
    base = _draw(9, 48, 1.0, 0.002)
    head = [x * 1.01 for x in _draw(10, 48, 1.0, 0.002)]  # significant, but 1 %
    c = _verdict(base, head)
    assert c["p"] < 1e-6 and c["verdict"] == "equivalent"


def test_holm_and_looks():
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert stats.holm([0.5]) == [0.5]
    # a shift significant alone is not once many cells share alpha and looks
    base, head = _draw(11, 8, 1.0, 0.02), [x * 1.04 for x in _draw(12, 8, 1.0, 0.02)]
    alone = _verdict(base, head)
    cells = {("cpu_s_per_token", n): (base, head) for n in range(1, 17)}
    many = stats.verdicts(cells, BETTER, alpha=0.05, looks=4, delta=0.05, min_effect=0.02)
    assert alone["p_holm"] < many[0]["p_holm"]
    assert many[0]["level"] == pytest.approx(0.0125)
    spec = {"blocks": 6, "add_blocks": 6, "max_blocks": 24}
    assert max_looks(spec) == 4
    assert max_looks({**spec, "add_blocks": 0}) == 1


def test_outliers_flag_unstable():
    xs = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 3.0]
    assert stats.outliers(xs) == 1
    c = _verdict(xs, xs[:-1] + [1.0])
    assert any("outlier" in u for u in c["unstable"])


def _bench(**row):
    r = {
        "parallel": 1,
        "decode_tok_s": 100.0,
        "prefill_tok_s": 900.0,
        "ttft_ms": 5.0,
        "cpu_s_per_token": 0.01,
        **row,
    }
    return {"bench_schema": 1, "sweep": [r, {**r, "parallel": 2}], "machine": {"cores": 2}}


def test_schema_parse():
    got = schema.parse(json.dumps(_bench()), schema.DEFAULT_METRICS, [1, 2])
    assert got["rows"][2]["decode_tok_s"] == 100.0 and got["machine"] == {"cores": 2}
    old = {"sweep": [{"parallel": 1, "decode_tok_s": 10.0, "prefill_tok_s": 100.0}]}
    with pytest.raises(schema.NotComparable, match="no bench_schema"):
        schema.parse(json.dumps(old), ["decode_tok_s"], [1])
    with pytest.raises(schema.NotComparable, match="newer"):
        schema.parse(json.dumps({**_bench(), "bench_schema": 2}), ["decode_tok_s"], [1])
    with pytest.raises(schema.NotComparable, match="cpu_s_per_token"):
        bad = _bench(cpu_s_per_token=None)
        schema.parse(json.dumps(bad), schema.DEFAULT_METRICS, [1])
    with pytest.raises(schema.NotComparable, match="parallel"):
        schema.parse(json.dumps(_bench()), ["decode_tok_s"], [1, 8])
    with pytest.raises(schema.NotComparable, match="no JSON"):
        schema.parse("speed: fast", ["decode_tok_s"], [1])


def _speed_result(verdict_shift: float) -> dict:
    spec = {"metrics": ["cpu_s_per_token", "decode_tok_s"], "parallel": [1, 2, 4, 8]}
    spec.update(alpha=0.05, delta=0.05, min_effect=0.02)
    samples = []
    for i in range(24):
        side = "base" if i % 4 in (0, 3) else "head"
        k = 1.0 if side == "base" else verdict_shift
        rows = {
            n: {"cpu_s_per_token": 2e-3 * k * (1 + 0.001 * (i % 5)), "decode_tok_s": 300.0 * n / k}
            for n in spec["parallel"]
        }
        samples.append({"side": side, "rows": rows})
    cells = judge(samples, spec, looks=1)
    return {
        "status": "fail" if any(c["verdict"] == "slower" for c in cells) else "pass",
        "reason": "",
        "cells": cells,
        "samples": samples,
        "spec": spec,
        "blocks": 6,
        "looks": 1,
        "level": 0.05,
        "wall_s": 60.0,
    }


def test_receipt_table_and_chart():
    sp = _speed_result(1.05)
    assert {c["verdict"] for c in sp["cells"]} == {"slower"}
    table = chart.table(sp)
    assert "CPU per token (ms) at 1 stream" in table and "decode (tok/s) at 8 streams" in table
    assert "❌ slower" in table and "95% CI" in table
    mermaid = chart.sweep_chart(sp)
    assert mermaid.startswith("```mermaid\nxychart-beta")
    assert 'x-axis "streams" [1, 2, 4, 8]' in mermaid
    assert "line [300.0, 600.0, 1200.0, 2400.0]" in mermaid
    assert chart.summary_line(sp) == "8 slower"
    assert chart.table({"cells": []}) == "" and chart.sweep_chart(None) == ""


def test_speed_verdict_exit_codes():
    gate = GateResult("g", "across_commits", Status.PASS, 1, 1)
    man = {"gates": [gate], "arms": [], "speed": _speed_result(1.05)}
    assert render.verdict(man) == ("❌ 1 gate failed: speed", 1)
    man["speed"] = _speed_result(1.0)
    man["speed"]["cells"][0]["verdict"] = "inconclusive"
    man["speed"]["status"] = "pass"
    assert render.verdict(man)[1] == 0


def test_matrix_speed_block(tmp_path):
    p = tmp_path / "m.yaml"
    head = "model: m\nprompts: p\ngates:\n  - name: g\n    across_commits: {}\n"
    p.write_text(head + "speed: {runs: 5, max_ratio_drop: 0.1}\n")
    sp = matrix.load(p).speed
    assert sp["blocks"] == 3 and sp["delta"] == 0.1 and "runs" not in sp
    p.write_text(head + "speed: {metrics: [decode_tok_s, joules]}\n")
    with pytest.raises(BadInput, match="speed.metrics"):
        matrix.load(p)
    p.write_text(head + "speed: {alpha: 1.5}\n")
    with pytest.raises(BadInput, match="speed.alpha"):
        matrix.load(p)
