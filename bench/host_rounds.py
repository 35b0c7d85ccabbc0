"""The host work of a decode round on the graph path, without a GPU: the engine's lanes,
`qwen3.graph_step` and the paged layout of `CupyKV.fixed_rows` (engine/ops/paged_rows.py),
around a stand-in backend whose `run_graph` runs no kernel and hands back rows that pick
their greedy token on the host (what cupy's device scan returns: an id and a margin a row).

What `python -m engine bench --backend cupy --parallel 1,8` pays per round beyond the graph
replay grows with the streams; this measures that growth where a device is scarce: CPU µs a
round (process time; the least of interleaved runs' medians) at each stream count.

    python bench/host_rounds.py --parallel 1 2 4 8 --gen-tokens 128 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from engine.ops.paged_rows import place_rows  # noqa: E402


class PickedRows:
    """Logits rows that stay 'on the device': greedy() gives each row's id and margin."""

    def __init__(self, ids: np.ndarray, margins: np.ndarray) -> None:
        self.ids, self.margins = ids, margins

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, key: slice) -> PickedRows:
        if not isinstance(key, slice):
            raise TypeError("stand-in rows: only slices (no host logits here)")
        return PickedRows(self.ids[key], self.margins[key])

    def greedy(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ids, self.margins


class PagedStandIn:
    """The KV memory's host side: `fixed_rows` lays rows out as CupyKV does."""

    def __init__(self, pages: int, page_rows: int, lane_rows: int) -> None:
        self.kind, self.page_rows = "bf16", page_rows
        self.lane_pages = max(1, -(-lane_rows // page_rows))
        self.scratch = pages

    def open_lane(self, lane: int, pages: list[int], rows: int) -> None:
        pass

    def fixed_rows(self, segments: list[Any], rows: int) -> dict[str, np.ndarray] | None:
        return place_rows(segments, rows, self.page_rows, self.lane_pages, self.scratch)


class GraphStandIn:
    """A backend with graphs on that runs none: the next token is a cheap function of the
    step's inputs, one id and margin a logits row, as cupy's `rows_to_host` hands them."""

    name, row_tile, graph_rows, key_block = "stand-in", 1, 64, 1

    def __init__(self, vocab: int, hidden: int) -> None:
        self.vocab, self.hidden = vocab, hidden

    def moe_in_graph(self, moe: Any) -> bool:
        return True

    def memory_available(self) -> int:
        return 1 << 40

    def new_kv(self, layers: int, pages: int, page_rows: int, *rest: Any) -> PagedStandIn:
        kind, lanes, lane_rows = rest[-3:]
        return PagedStandIn(pages, page_rows, lane_rows)

    def run_graph(self, owner: Any, key: Any, inputs: dict[str, np.ndarray], body: Any,
                  take: Any) -> tuple[Any, ...]:  # fmt: skip
        need = inputs["need"][: len(take if not isinstance(take, tuple) else take[0])]
        ids = (inputs["ids"][need] * 31 + inputs["slots"][need] + 7) % self.vocab
        logits = PickedRows(ids.astype(np.int64), np.ones(len(ids), dtype=np.float32))
        return logits, np.zeros((len(need), self.hidden), dtype=np.float32)


def main() -> None:
    from engine.cli.bench_run import TimedRun
    from engine.model.loader import load_model

    p = argparse.ArgumentParser()
    p.add_argument("--model", default="fixtures/models/tiny-qwen3")
    p.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--gen-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    model = load_model(args.model, "numpy")
    model.ops = GraphStandIn(model.config.vocab_size, model.config.hidden_size)
    ns = argparse.Namespace(
        model=args.model, backend="numpy", context=1024, kv="bf16", kv_pages=0, page_rows=16,
        step_rows=64, share=1.0, drafter="none", drafter_model=None, draft_tokens=4,
        prompt_tokens=args.prompt_tokens,
    )  # fmt: skip
    os.environ["ENGINE_LOGIT_HASHES"] = "0"  # hashes read whole rows: none here
    per_round: dict[int, list[float]] = {n: [] for n in args.parallel}
    for _ in range(args.repeats):
        for n in args.parallel:  # interleaved: the machine's drift falls on every count
            run = TimedRun(model, ns, n, args.gen_tokens)
            while run.step():
                pass
            a = run.actions
            rounds = [c for k, c in zip(a["kind"], a["cpu_s"], strict=True) if k == "round"]
            per_round[n].append(statistics.median(rounds) * 1e6)
            if min(len(s.generated) for s in run.streams) != args.gen_tokens:
                raise SystemExit(f"parallel {n}: a stream stopped short")
    base = min(per_round[args.parallel[0]])
    for n, us in per_round.items():  # the least: this host's speed drifts by 1.5x and more
        low = min(us)
        print(f"parallel {n}: {low:7.1f} µs CPU a round (the least of {len(us)} runs' medians;"
              f" median {statistics.median(us):.1f}, max {max(us):.1f}), {low / base:.2f}x"
              f" parallel {args.parallel[0]}, {low / n:.1f} µs a stream")  # fmt: skip


if __name__ == "__main__":
    main()
