"""Every metrics object holds the engine's counters (one list, engine/lanes/metrics.py) and
its own keys: `run --metrics` RUN_METRICS_KEYS, `serve`'s /metrics SERVE_METRICS_KEYS, as
capabilities lists them."""

from __future__ import annotations

from engine.cli.capabilities import capabilities
from engine.cli.run import RUN_METRICS_KEYS
from engine.config import EngineConfig
from engine.lanes.engine import Engine
from engine.lanes.metrics import COUNTER_KEYS, counters
from engine.lanes.request import Request
from engine.model.fake import FakeModel
from engine.serve.worker import SERVE_METRICS_KEYS, EngineWorker
from tests.engine.randmodel import random_config


def engine() -> Engine:
    eng = Engine(FakeModel(random_config()), EngineConfig(parallel=2, flags={}))
    eng.submit(Request(id="a", prompt_ids=[1, 2, 3], max_tokens=4))
    eng.run()
    return eng


def test_counters_are_the_counter_keys_and_count() -> None:
    got = counters(engine())
    assert tuple(got) == COUNTER_KEYS
    assert got["decode_tokens"] > 0 and got["pages_in_use"] == 0


def test_serve_metrics_are_its_keys() -> None:
    assert tuple(EngineWorker(engine()).metrics()) == SERVE_METRICS_KEYS


def test_capabilities_list_both_and_share_the_counters() -> None:
    caps = capabilities()
    assert caps["metrics_keys"] == list(RUN_METRICS_KEYS)
    assert caps["serve"]["metrics_keys"] == list(SERVE_METRICS_KEYS)
    assert set(COUNTER_KEYS) <= set(RUN_METRICS_KEYS) & set(SERVE_METRICS_KEYS)
