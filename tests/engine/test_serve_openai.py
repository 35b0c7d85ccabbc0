"""The server through the official `openai` client: a bounded loopback load test (64
clients x 4 requests, every reply equal to its solo run, nothing in use afterwards) and
the OpenAI error a client sees for a prompt past the context."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.lanes.engine import Engine
from engine.lanes.request import Request
from engine.model.loader import load_model
from engine.serve.app import Settings
from engine.serve.runner import HttpServer
from engine.serve.worker import EngineWorker

openai = pytest.importorskip("openai")

TINY = Path(__file__).parents[2] / "fixtures" / "models" / "tiny-qwen3"
CLIENTS, PER_CLIENT, MAX_TOKENS = 64, 4, 6


@pytest.fixture(scope="module")
def model():
    return load_model(TINY)


@pytest.fixture(scope="module")
def served(model):
    worker = EngineWorker(Engine(model, EngineConfig(parallel=8, kv_pages=256)))
    worker.start()
    srv = HttpServer(Settings(worker, None, "tiny-qwen3"), "127.0.0.1", 0)
    yield srv.start() + "/v1", worker
    srv.stop()
    worker.stop()


def prompt_of(i: int) -> list[int]:
    return [3 + (i * 37 + k * 11) % 900 for k in range(1 + i % 23)]


def solo(model, ids: list[int], temperature: float, seed: int) -> list[int]:
    engine = Engine(model, EngineConfig())
    engine.submit(Request("s", ids, MAX_TOKENS, temperature=temperature, seed=seed))
    return engine.run()[0].generated


def test_64_clients_x_4_requests_equal_solo_and_leave_nothing_in_use(served, model):
    url, worker = served

    def client(c: int) -> list[tuple[int, list[int]]]:
        api = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
        out = []
        for r in range(PER_CLIENT):
            i = c * PER_CLIENT + r
            resp = api.completions.create(
                model="tiny-qwen3",
                prompt=prompt_of(i),
                max_tokens=MAX_TOKENS,
                temperature=0.8 if i % 3 == 0 else 0.0,
                seed=i,
            )
            out.append((i, resp.choices[0].model_dump()["token_ids"]))
        return out

    with ThreadPoolExecutor(CLIENTS) as pool:
        replies = [x for got in pool.map(client, range(CLIENTS)) for x in got]
    assert len(replies) == CLIENTS * PER_CLIENT
    for i, ids in replies:
        assert ids == solo(model, prompt_of(i), 0.8 if i % 3 == 0 else 0.0, i), i
    metrics = worker.metrics()
    assert metrics["live_streams"] == 0 and metrics["pages_in_use"] == 0


def test_a_prompt_past_the_context_is_context_length_exceeded(served):
    url, _ = served
    api = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as err:
        api.completions.create(model="tiny-qwen3", prompt=[5] * 10, max_tokens=5000)
    assert err.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as err:
        api.completions.create(model="tiny-qwen3", prompt=[5], max_tokens=2, n=2)
    assert err.value.param == "n"
