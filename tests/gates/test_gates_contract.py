"""gates/run/contract.py against the engines it reads: the real one of this tree, and the stub
of the host tests. Neither may drift from what the runner sends and keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gates.plan.arm_config import ArmConfig
from gates.run import contract
from gates.run.capabilities import Capabilities

REPO = Path(__file__).resolve().parents[2]
STUB = Path(__file__).resolve().parent / "stub_engine"


def engine_cli(root: Path, *args: str) -> str:
    """stdout of `python -m engine ARGS` run from the engine tree at ``root``."""
    return subprocess.run(
        [sys.executable, "-m", "engine", *args],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def caps_of(root: Path) -> dict:
    return json.loads(engine_cli(root, "capabilities", "--json"))


def widest_config(caps: Capabilities) -> ArmConfig:
    """An arm config that makes engine_args emit every flag it knows."""
    return ArmConfig(
        model="m",
        backend="numpy",
        prompts="p",
        kv="fp8",
        parallel=4,
        paging="on",
        pages=64,
        drafter=next(d for d in caps.drafters or () if d != "none"),
        draft_tokens=3,
        context=512,
        page_rows=16,
        step_rows=32,
        share=0.5,
        serial=True,
        flags={},
    )


@pytest.mark.parametrize("root", [REPO, STUB], ids=["real", "stub"])
def test_every_flag_the_runner_sends_is_one_the_engine_lists(root):
    caps = Capabilities.from_json(caps_of(root))
    cfg = widest_config(caps).replace(backend=(caps.backends or ())[0])
    sent = {a for a in contract.engine_args(cfg) if a.startswith("--")}
    assert sent <= set(caps.flags or ()), sent - set(caps.flags or ())
    assert contract.missing(caps, cfg) is None
    usage = engine_cli(root, "run", "--help")  # and the engine really takes them
    assert not [f for f in sent if f not in usage], usage


def test_the_real_engine_lists_what_the_runner_reads():
    raw = caps_of(REPO)
    caps = Capabilities.from_json(raw)
    assert caps.contract is not None and caps.contract >= 2
    assert contract.writes_trace(caps)
    assert contract.request_keys(caps) >= contract.V1_REQUEST_KEYS
    assert set(contract.REPLY_KEYS) <= set(raw["reply_keys"])
    for name in ("pages_in_use", "unplanned_allocations", "drafter_states"):
        assert name in raw["metrics_keys"]
    assert contract.missing(caps, widest_config(caps)) is None
    assert Capabilities.from_json(caps.to_json()) == caps


@pytest.mark.parametrize("root", [REPO, STUB], ids=["real", "stub"])
def test_the_bench_the_speed_runner_drives_is_the_schema_it_reads(root, tmp_path):
    """bench --lockstep of each engine: the flags the runner sends, the ready header, a
    stepped run's answer with every metric the matrix may ask for (gates/run/speed/schema.py)."""
    from gates.plan.speed import SpeedSpec
    from gates.run.speed import schema
    from gates.run.speed.measure import bench_argv

    model = REPO / "fixtures" / "models" / "tiny-qwen3"
    spec = SpeedSpec(parallel=(1, 2), prompt_tokens=8, gen_tokens=3)
    argv = bench_argv(model, "numpy", spec)
    asks = [{"parallel": 2, "turn": 1}] * 8 + [{"parallel": 1}]
    out = subprocess.run(
        argv,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1"},
        input="".join(json.dumps(a) + "\n" for a in asks),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    header, *answers = (json.loads(x) for x in out)
    assert schema.OLDEST <= schema.Header.parse(header).version <= schema.SCHEMA
    done = [a for a in answers if a.get("done") is True]
    assert len(done) == 1 and answers[-1]["parallel"] == 1
    for got, n in ((done[0], 2), (answers[-1], 1)):
        run = schema.TimedRun.parse(got, n, list(schema.METRICS))
        assert run.parallel == n and run.kept == {k: got[k] for k in schema.KEEP if k in got}
