"""One timed bench run of N streams, whole (``measure``) or one engine action at a time.

Every action is recorded (``actions``, in columns): its kind, the CPU seconds of this
process from just before the engine's step to its end, its wall seconds, the rows it fed
and the tokens it made. A run stepped from outside (``TimedRun.step``, for
``bench --lockstep`` turns) counts only the engine's own time: what the process does
between turns (reading a request, printing) is not in any action, and TTFT and CPU per
token are sums over actions.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from engine.cli.common import engine_config, make_drafter
from engine.lanes.engine import Engine, Event
from engine.lanes.request import Request

FIELDS = ("kind", "cpu_s", "wall_s", "rows", "tokens")


def requests(n: int, prompt_tokens: int, gen_tokens: int, vocab: int) -> list[Request]:
    rng = np.random.default_rng(1234)
    hi = min(vocab, 1000)
    return [
        Request(
            id=f"b{i}",
            prompt_ids=rng.integers(1, hi, prompt_tokens).tolist(),
            max_tokens=gen_tokens,
            ignore_eos=True,
        )
        for i in range(n)
    ]


class Reuse:
    """The KV memory and drafter of the last run of each stream count, handed to the next run
    of that count: a backend's captured steps belong to them, so every run after the first
    replays graphs where the first captured them, as one long-lived server does (a fresh
    engine each, no prefix cached between runs). `only(n)` forgets the other counts."""

    def __init__(self) -> None:
        self.kept: dict[int, tuple[Any, Any]] = {}

    def engine(self, model: Any, cfg: Any, n: int) -> Engine:
        kv, drafter = self.kept.get(n, (None, None))
        engine = Engine(model, cfg, drafter=drafter or make_drafter(cfg, model), kv=kv)
        self.kept[n] = (engine.kv, engine.drafter)
        return engine

    def only(self, n: int) -> None:
        self.kept = {k: v for k, v in self.kept.items() if k == n}


class TimedRun:
    def __init__(
        self,
        model: Any,
        args: argparse.Namespace,
        n: int,
        gen_tokens: int,
        reuse: Reuse | None = None,
    ) -> None:
        self.n = n
        cfg = engine_config(args, parallel=n)
        self.engine = (reuse or Reuse()).engine(model, cfg, n)
        reqs = requests(n, args.prompt_tokens, gen_tokens, model.config.vocab_size)
        self.streams = [self.engine.submit(r) for r in reqs]
        self.actions: dict[str, list[Any]] = {k: [] for k in FIELDS}
        self.done = False
        self._cpu, self._made = time.process_time(), 0
        self._ttft_s: list[float] = []
        self._engine_s = 0.0
        self.engine.on_event = self._on_event

    def _on_event(self, _: Engine, e: Event) -> None:
        now, made = time.process_time(), sum(s.generated_count for s in self.streams)
        got = (e.kind, now - self._cpu, e.seconds, e.rows, made - self._made)
        for k, v in zip(FIELDS, got, strict=True):
            self.actions[k].append(v)
        self._cpu, self._made = now, made
        self._engine_s += e.seconds
        self._ttft_s.extend(self._engine_s for sid in e.first_token if sid is not None)

    def step(self) -> bool:
        """One engine action; False once the run is over."""
        self._cpu = time.process_time()
        self.done = self.done or not self.engine.step()
        return not self.done

    def summary(self, wall: float | None = None, cpu: float | None = None) -> dict[str, Any]:
        """The sweep row of the run. ``wall``/``cpu``: of the whole run when it ran alone;
        None (a stepped run): the sums over its actions."""
        a = self.actions
        rounds = [i for i, k in enumerate(a["kind"]) if k == "round"]
        steps = [i for i, k in enumerate(a["kind"]) if k != "round"]
        prefill_s = sum(a["wall_s"][i] for i in steps)
        round_s = sum(a["wall_s"][i] for i in rounds)
        cpu = sum(a["cpu_s"]) if cpu is None else cpu
        generated = sum(len(s.generated) for s in self.streams)
        decoded = sum(max(0, len(s.generated) - 1) for s in self.streams)  # first: prefill
        prompt_rows = self.engine.stats["prefill_tokens"]
        if wall is None:
            ttft = sum(self._ttft_s) / len(self._ttft_s) if self._ttft_s else 0.0
        else:
            firsts = {
                sid: e.start + e.seconds
                for e in self.engine.events
                for sid in e.first_token
                if sid is not None
            }
            ttft = sum(firsts.values()) / len(firsts) if firsts else 0.0
        round_cpu = sum(a["cpu_s"][i] for i in rounds)
        step_cpu = sum(a["cpu_s"][i] for i in steps)
        ss = self.streams
        return {
            "parallel": self.n,
            "decode_tok_s": decoded / round_s if round_s else 0.0,
            "prefill_tok_s": prompt_rows / prefill_s if prefill_s else 0.0,
            "ttft_ms": ttft * 1000,
            "cpu_s_per_token": cpu / generated if generated else 0.0,
            "decode_cpu_s_per_token": round_cpu / decoded if decoded else 0.0,
            "prefill_cpu_s_per_token": step_cpu / prompt_rows if prompt_rows else 0.0,
            "wall_s": self._engine_s if wall is None else wall,
            "cpu_s": cpu,
            "generated_tokens": generated,
            "prompt_tokens": prompt_rows,
            "tokens_per_round": decoded / max(1, sum(s.rounds for s in ss)),
            "acceptance": sum(s.accepted for s in ss) / max(1, sum(s.drafted for s in ss)),
            "actions": a,
        }


def measure(
    model: Any, args: argparse.Namespace, n: int, gen_tokens: int, reuse: Reuse | None = None
) -> dict[str, Any]:
    """One timed run of ``n`` streams, alone: its sweep row and ``actions``."""
    run = TimedRun(model, args, n, gen_tokens, reuse)
    cpu0, t0 = time.process_time(), time.perf_counter()
    run._cpu = cpu0
    run.engine.run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return run.summary(wall, cpu)
