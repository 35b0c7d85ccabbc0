"""Decode tok/s of transformers, mlx-lm and this engine (numpy, mlx) side by side, one thread
each, on the same checkpoint, prompts and output lengths (issue 11; docs/peers.md).

    python bench/peers.py [--models tiny,mid] [--streams 1,8] [--repeats 5] [--json out.json]
    nox -s peers [-- same arguments]

Decode time is timed step by step, never by subtracting a prefill run: from the moment every
stream holds its first generated token (the one that comes out of prefill) to the moment every
stream holds its last. Decode tok/s = streams x (gen - 1) / that time. Per peer:
  transformers  `generate` (float32, CPU, greedy, min_new_tokens = max_new_tokens, N equal-length
                prompts, no padding); a StoppingCriteria stamps the clock after every step.
  mlx-lm        the model cast to float32 (`set_dtype`); 1 stream: `stream_generate`; N streams:
                `BatchGenerator` if the installed mlx-lm has it (else the row says so);
                the clock is stamped as each step's tokens come out.
  engine-*      engine.lanes.engine.Engine, ignore_eos requests, fp32 compute, bf16 KV (--kv):
                the summed seconds of its decode rounds (prompt steps excluded).
Repeats interleave the peers (A B C D A B C D ...) after one untimed warm-up each; the table shows
the median and [min-max]; the ratio is the median [min-max] of engine arm / transformers taken
repeat by repeat (each pair ran back to back). --from-json re-prints the tables of a saved run.
This file is a script, not part of the engine package: the engine never imports it.
"""

from __future__ import annotations

import os

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
):
    os.environ[_var] = "1"  # before numpy, torch or mlx start their thread pools

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from bench.peer_runners import Runner, load_peers  # noqa: E402

TINY = ROOT / "fixtures" / "models" / "tiny-qwen3"
# the mid checkpoint: (hidden, intermediate, layers, heads, kv heads, head_dim, vocab) of issue 11
MID_SHAPE = (512, 1536, 8, 8, 4, 64, 1088)
PEERS = ("transformers", "mlx-lm", "engine-numpy", "engine-mlx")


def make_mid(out: Path, seed: int = 0) -> Path:
    """The mid Qwen3 from `seed` alone: tiny-qwen3's tokenizer and config keys, MID_SHAPE, and
    engine.model.synthetic's per-tensor values (bf16, depend only on seed and tensor name)."""
    from engine.model import safetensors_file, synthetic

    if (out / "model.safetensors").is_file():
        return out
    config = json.loads((TINY / "config.json").read_text())
    config.pop("num_nextn_predict_layers", None)  # no MTP head: only the plain decode is timed
    h, inter, layers, heads, kv, d, vocab = MID_SHAPE
    config.update(
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=d,
        vocab_size=vocab,
        max_position_embeddings=4096,
    )
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    shapes = synthetic.tensor_shapes(config)
    tensors = {k: synthetic.make_tensor(k, s, seed) for k, s in shapes.items()}
    safetensors_file.save(tmp / "model.safetensors", tensors, {"format": "pt"})
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (tmp / name).write_bytes((TINY / name).read_bytes())
    tmp.rename(out)
    return out


# ---- measurement ------------------------------------------------------------------------
def prompts_for(streams: int, length: int, vocab: int, seed: int = 1234) -> list[list[int]]:
    rng = np.random.default_rng([seed, streams, length])
    return rng.integers(1, min(vocab, 1000), (streams, length)).tolist()


def measure(
    peers: dict[str, Runner | str], cases: list[list[list[int]]], gen: int, repeats: int
) -> list[dict[str, dict[str, Any]]]:
    """Per case, per peer: tok/s of each repeat, or why none. One untimed warm-up (8 new tokens)
    per case and peer, then repeats interleaved over cases and peers (A1 B1 A2 B2 A1 B1 ...)."""
    live = [n for n, r in peers.items() if not isinstance(r, str)]
    notes = {n: r for n, r in peers.items() if isinstance(r, str)}
    runs = [{n: [] for n in live} for _ in cases]
    busy = [{n: [] for n in live} for _ in cases]  # process CPU s / wall s of a whole run
    for rep in range(repeats + 1):
        for c, prompts in enumerate(cases):
            for name in [n for n in live if n not in notes]:
                cpu, wall = time.process_time(), time.perf_counter()
                try:
                    seconds, tokens = peers[name](prompts, gen if rep else min(gen, 8))  # type: ignore[operator]
                except NotImplementedError as e:
                    notes[name] = str(e)
                    continue
                if rep:
                    runs[c][name].append(tokens / seconds)
                    busy[c][name].append((time.process_time() - cpu) / (time.perf_counter() - wall))
    out = []
    for c in range(len(cases)):
        row: dict[str, dict[str, Any]] = {n: {"note": why} for n, why in notes.items()}
        for name, rates in runs[c].items():
            if name in notes:
                continue
            row[name] = {
                "median": statistics.median(rates),
                "min": min(rates),
                "max": max(rates),
                "runs": rates,
                "cpu_per_wall": statistics.median(busy[c][name]),
            }
        out.append(row)
    return out


def ratios(row: dict[str, dict[str, Any]]) -> dict[str, list[float]]:
    """Engine arm / transformers, repeat by repeat (the two ran back to back, under the same
    load): [median, min, max] of those paired ratios."""
    base = row.get("transformers", {}).get("runs")
    out = {}
    for n in PEERS:
        runs = row.get(n, {}).get("runs")
        if n.startswith("engine") and base and runs:
            paired = [a / b for a, b in zip(runs, base, strict=True)]
            out[n] = [statistics.median(paired), min(paired), max(paired)]
    return out


# ---- output -------------------------------------------------------------------------------
def cell(stats: dict[str, Any] | None) -> str:
    if not stats:
        return "-"
    if "median" not in stats:
        return stats["note"]
    return f"{stats['median']:.1f} [{stats['min']:.1f}-{stats['max']:.1f}]"


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    arms = [n for n in names if n.startswith("engine")]
    head = ["checkpoint", "streams", "prompt", *names, *(f"{a} / transformers" for a in arms)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        rat = ratios(r["peers"])
        cells = [r["checkpoint"], str(r["streams"]), str(r["prompt"])]
        cells += [cell(r["peers"].get(n)) for n in names]
        cells += [
            f"{rat[a][0]:.2f}x [{rat[a][1]:.2f}-{rat[a][2]:.2f}]" if a in rat else "-" for a in arms
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def context_table(rows: list[dict[str, Any]], names: list[str], short: int, long: int) -> str:
    """Per peer: decode tok/s at a `long` prompt over that at a `short` one (same checkpoint)."""
    by = {(r["checkpoint"], r["streams"], r["prompt"]): r for r in rows if r.get("pair", True)}
    lines = [
        f"| checkpoint | streams | peer | prompt {short} | prompt {long} "
        f"| ratio {long} / {short} |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for ck, n, p in by:
        if p != long or (ck, n, short) not in by:
            continue
        for name in names:
            a, b = by[(ck, n, short)]["peers"].get(name), by[(ck, n, p)]["peers"].get(name)
            ratio = "-"
            if a and b and "runs" in a and "runs" in b:  # repeat by repeat, as they alternated
                paired = [y / x for x, y in zip(a["runs"], b["runs"], strict=True)]
                ratio = f"{statistics.median(paired):.2f}x [{min(paired):.2f}-{max(paired):.2f}]"
            lines.append(f"| {ck} | {n} | {name} | {cell(a)} | {cell(b)} | {ratio} |")
    return "\n".join(lines)


def cpu_model() -> str:
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    return next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")


def versions() -> dict[str, str]:
    out = {"numpy": np.__version__}
    for mod in ("torch", "transformers", "mlx", "mlx_lm"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", None) or __import__(f"{mod}.core").core.__version__
        except ImportError:
            out[mod] = "absent"
    return out


# ---- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,mid", help="tiny, mid, or model directories")
    p.add_argument("--streams", default="1,8")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--gen-tokens", type=int, default=64)
    p.add_argument("--context", default="64,1024", help="short,long prompts on mid, 1 stream")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--peers", default=",".join(PEERS))
    p.add_argument("--kv", default="bf16", help="the engine's KV storage")
    p.add_argument("--mid-dir", default="/tmp/peers-mid-qwen3", help="made here if missing")
    p.add_argument("--json", help="also write every run to this file")
    p.add_argument("--from-json", help="measure nothing: print the tables of a saved --json run")
    args = p.parse_args(argv)
    try:
        args.streams = [int(x) for x in args.streams.split(",")]
        args.context = [int(x) for x in args.context.split(",") if x]
    except ValueError:
        p.error("--streams, --context: comma-separated integers")
    args.peers = args.peers.split(",")
    bad = [n for n in args.peers if n not in PEERS]
    if bad or args.repeats < 1 or args.gen_tokens < 2:
        p.error(f"--peers from {', '.join(PEERS)}; --repeats >= 1; --gen-tokens >= 2")
    if args.context and len(args.context) != 2:
        p.error("--context: two prompt lengths (short,long), or '' to skip")
    return args


def scenarios(args: argparse.Namespace) -> list[tuple[str, Path, list[tuple[int, int]]]]:
    """(checkpoint, directory, [(streams, prompt tokens), ...] measured interleaved)."""
    out = []
    for m in args.models.split(","):
        path = {"tiny": TINY, "mid": None}.get(m, Path(m))
        if path is None:
            path = make_mid(Path(args.mid_dir))
        if not (path / "config.json").is_file():
            print(f"--models: {path}: no config.json", file=sys.stderr)
            raise SystemExit(2)
        if m == "mid" and args.context:  # both lengths in one interleaved run: same load
            out.append((m, path, [(1, c) for c in args.context]))
        out += [(m, path, [(n, args.prompt_tokens)]) for n in args.streams]
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        return from_json(args.from_json)
    load0, t0 = os.getloadavg(), time.time()
    rows, loaded = [], {}
    for name, path, cases in scenarios(args):
        if path not in loaded:
            loaded = {path: load_peers(args.peers, path, args.kv)}  # one checkpoint in memory
        vocab = json.loads((path / "config.json").read_text())["vocab_size"]
        prompts = [prompts_for(n, p, vocab) for n, p in cases]
        for (n, p), row in zip(
            cases, measure(loaded[path], prompts, args.gen_tokens, args.repeats), strict=True
        ):
            pair = len(cases) > 1  # the short/long prompt pair of the context table
            rows.append({"checkpoint": name, "streams": n, "prompt": p, "pair": pair, "peers": row})
            line = ", ".join(f"{k} {cell(v)}" for k, v in row.items())
            print(f"{name} x{n} prompt {p}: {line}", file=sys.stderr, flush=True)
        if args.json:  # after every scenario, so a cut-short run keeps what it measured
            Path(args.json).write_text(
                json.dumps({"facts": run_facts(args, load0, t0), "rows": rows}, indent=1)
            )
    facts = run_facts(args, load0, t0)
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "rows": rows}, indent=1))
    render(facts, rows)
    return 0


def run_facts(args: argparse.Namespace, load0: tuple[float, ...], t0: float) -> dict[str, Any]:
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0)),
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "loadavg_before": [round(x, 2) for x in load0],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(time.time() - t0, 1),
        "versions": versions(),
        "threads": 1,
        "gen_tokens": args.gen_tokens,
        "repeats": args.repeats,
        "kv": args.kv,
        "peers": args.peers,
        "context": args.context,
    }


def render(facts: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    names = facts.get("peers") or [n for n in PEERS if any(n in r["peers"] for r in rows)]
    print(
        f"decode tok/s, median [min-max] of {facts['repeats']} interleaved repeats, "
        f"{facts['gen_tokens']} new tokens per stream, 1 thread; decode time = timed steps "
        "(first token of every stream -> last token of every stream)"
    )
    print()
    print(table(rows, names))
    context = facts.get("context", [64, 1024])
    if len(context) == 2:
        print()
        print(context_table(rows, names, *context))
    print()
    print(json.dumps(facts))


def from_json(path: str) -> int:
    try:
        saved = json.loads(Path(path).read_text())
        render(saved["facts"], saved["rows"])
    except (OSError, ValueError, KeyError) as e:
        print(f"{path}: not a saved bench/peers.py run ({e})", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
