"""Decode step time and prefill speed on a GPU: this engine's cupy backend against transformers
on the same synthetic weights (docs/cupy.md has the table and how it was made).

    python bench/cupy_speed.py --model synthetic:qwen3-0.6b --streams 1 8 --context 512 \
        [--transformers eager static] --json out.json

Ours: model.forward on the cupy backend, one segment per stream: a prefill of `context`
tokens per stream (at least PROMPTS prompts timed; prefill is their median), then decode
steps of one token per stream (logits copied to the host, as the engine does). Transformers:
Qwen3ForCausalLM from the same directory in bf16; eager with a dynamic cache, and generate()
with a static cache (which transformers compiles, CUDA graphs included). The HBM floor is the
bytes a decode step must read (weights in bf16 and every stream's K/V) at the device's peak
memory bandwidth (memory clock x 2 x bus width; 4.8 TB/s, the H200's, where the runtime gives
neither; `--hbm-tb-s` sets it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

HBM_BYTES_S = 4.8e12  # an H200's, where the device's cannot be read
PROMPTS = 7  # prompts timed a process (prefill: their median)


def device_bytes_s() -> float:
    """The current device's peak memory bandwidth: cudaDevAttrMemoryClockRate (36, kHz) x 2
    (double data rate) x cudaDevAttrGlobalMemoryBusWidth (37, bits) / 8; HBM_BYTES_S where
    the runtime answers neither (the specs: 3.35e12 for an H100 SXM, 4.8e12 for an H200)."""
    import cupy as cp

    try:
        dev = cp.cuda.Device().id
        khz = cp.cuda.runtime.deviceGetAttribute(36, dev)
        bits = cp.cuda.runtime.deviceGetAttribute(37, dev)
    except Exception:  # noqa: BLE001 - any runtime without the attributes
        return HBM_BYTES_S
    return 2 * khz * 1e3 * bits / 8 if khz > 0 and bits > 0 else HBM_BYTES_S


def floor_ms(
    cfg: Any, streams: int, context: int, code_bytes: int = 2, bytes_s: float = HBM_BYTES_S
) -> float:
    h, inter, d = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    per_layer = h * (cfg.num_heads + 2 * cfg.num_kv_heads) * d + cfg.num_heads * d * h
    if cfg.num_experts:  # every layer sparse (synthetic A3B): the router and the experts hit
        hit = min(cfg.num_experts, streams * cfg.num_experts_per_tok)
        per_layer += cfg.num_experts * h + hit * 3 * h * cfg.moe_intermediate_size
    else:
        per_layer += 3 * h * inter
    weights = 2 * (cfg.num_layers * per_layer + cfg.vocab_size * h)
    kv = streams * context * cfg.num_layers * 2 * cfg.num_kv_heads * d * code_bytes
    return (weights + kv) / bytes_s * 1e3


def ours(
    spec: str, streams: int, context: int, steps: int, kind: str, graph: bool, keep: Any = None
) -> dict[str, float]:
    """Step and prefill figures; with a dict `keep`, the decode step's graph in keep["graph"]
    and the KV memory it reads in keep["kv"] (held, so the graph's buffers stay alive), its
    CupyOps in keep["ops"]."""
    import cupy as cp

    from engine.model.graph_shape import padded_rows, step_rows
    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment, step_key

    model = _cached_model(spec, load_model)
    model.ops.graphs = graph  # the forward takes a graph where ops.run_graph gives one
    page_rows = 16
    per_lane = -(-(context + steps + 1) // page_rows)
    kv = model.new_kv(streams * per_lane, page_rows, kind, lanes=streams)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    lanes = [list(range(i * per_lane, (i + 1) * per_lane)) for i in range(streams)]
    # warm: a prompt step's graph is captured at its first call (its K/V are written again)
    model.forward(
        [Segment(rng.integers(0, vocab, context), 0, lanes[0], np.asarray([context - 1]), lane=0)],
        kv,
    )
    # every lane's prompt, then more on the first lanes (a lane's rows written again) up to
    # PROMPTS: the median prompt, where one alone read 40-48k tok/s from process to process
    prompt_s = []
    for i in range(max(streams, PROMPTS)):
        toks = rng.integers(0, vocab, context)
        seg = Segment(toks, 0, lanes[i % streams], np.asarray([context - 1]), lane=i % streams)
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        model.forward([seg], kv)
        cp.cuda.Device().synchronize()
        prompt_s.append(time.perf_counter() - t)
    times = []
    for s in range(steps):
        segs = [
            Segment(rng.integers(0, vocab, 1), context + s, lanes[i], np.asarray([0]), lane=i)
            for i in range(streams)
        ]
        t = time.perf_counter()
        model.forward(segs, kv)  # logits come back to the host: synchronous
        times.append(time.perf_counter() - t)
    step = float(np.median(times[2:])) * 1e3
    dense = model.layers[0].moe is None
    extra = {} if graph or not dense else breakdown(model, kv, lanes, context, streams)
    if graph:
        # the decode step's graph: `streams` rows (one each) at the step's shape, as many
        # rows of logits padded to the row tile (graph_step's key)
        tile = model.ops.row_tile
        rows = step_rows(streams, tile, model.ops.graph_rows)
        logit_rows = len(padded_rows(np.arange(streams), tile))
        g = model.ops.step_graph(kv, step_key(model, rows, (), logit_rows))
        extra["replay_ms"] = g.replay_ms()
        if keep is not None:
            keep["graph"], keep["kv"], keep["ops"] = g, kv, model.ops
    return {
        **extra,
        "step_ms": step,
        "tok_s": streams / step * 1e3,
        "prefill_tok_s": context / float(np.median(prompt_s)),
        "prompt_ms": [round(t * 1e3, 3) for t in prompt_s],
    }


_models: dict[str, Any] = {}


def _gpu_ms(fn: Any, reps: int = 20) -> float:
    """GPU ms of one fn() call: `reps` calls captured in one CUDA graph, then replayed."""
    import cupy as cp

    stream = cp.cuda.Stream(non_blocking=True)
    pool = cp.get_default_memory_pool()
    keep: list[Any] = []

    def alloc(size: int) -> Any:
        keep.append(pool.malloc(size))
        return keep[-1]

    with stream:
        fn()
        stream.synchronize()
        cp.cuda.set_allocator(alloc)
        try:
            stream.begin_capture()
            for _ in range(reps):
                fn()
            graph = stream.end_capture()
        finally:
            cp.cuda.set_allocator(pool.malloc)
    graph.launch(stream)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    graph.launch(stream)
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / reps


def breakdown(model: Any, kv: Any, lanes: list, context: int, streams: int) -> dict[str, float]:
    """GPU (and launch) ms of one decode step's parts at `streams` rows, eager: the four
    weight GEMMs of a layer times the layers, the head, and one layer's attention times the
    layers."""
    import cupy as cp

    from engine.ops.base import KVSegment

    ops, cfg, layer = model.ops, model.config, model.layers[0]
    out: dict[str, float] = {}
    for name in ("qkv", "o", "gate_up", "down"):
        w = getattr(layer, name)
        x = cp.ones((streams, w.k), dtype=cp.float32)
        out[f"gemm_{name}_ms_x_layers"] = (
            _gpu_ms(lambda x=x, w=w: ops.linear(x, w)) * cfg.num_layers
        )
    x = cp.ones((streams, cfg.hidden_size), dtype=cp.float32)
    out["gemm_head_ms"] = _gpu_ms(lambda: ops.linear(x, model.lm_head))
    q = cp.ones((streams, cfg.num_heads, cfg.head_dim), dtype=cp.float32)
    k = cp.ones((streams, cfg.num_kv_heads, cfg.head_dim), dtype=cp.float32)
    segs = [KVSegment(i, lanes[i], context - 1, 1) for i in range(streams)]
    pos = np.full(streams, context - 1)
    kv.store_attend(0, segs, pos, q, k, k)  # the forward's per-step arrays, for the parts
    out["attention_ms_x_layers"] = cfg.num_layers * _gpu_ms(
        lambda: kv.ops.attend(
            kv.kind, q, kv.k[0], kv.v[0], None, None, kv._meta[1:] + (kv.page_rows,)
        )
    )
    slots = kv._meta[0]
    out["kv_store_ms_x_layers"] = (
        2 * cfg.num_layers * _gpu_ms(lambda: kv.store(k, slots, kv.k[0], None))
    )
    h = cp.ones((streams, cfg.hidden_size), dtype=cp.float32)
    out["rms_norm_ms_x_layers"] = (
        2 * cfg.num_layers * _gpu_ms(lambda: ops.rms_norm(h, layer.in_norm, 1e-6))
    )
    out["qk_norm_ms_x_layers"] = (
        2 * cfg.num_layers * _gpu_ms(lambda: ops.rms_norm(q, layer.q_norm, 1e-6))
    )
    cos = cp.ones((streams, cfg.head_dim // 2), dtype=cp.float32)
    out["rope_ms_x_layers"] = 2 * cfg.num_layers * _gpu_ms(lambda: ops.rope(q, cos, cos))
    if hasattr(ops, "qk_norm_rope"):  # the fused q/k norm + RoPE the forward runs instead
        heads = cfg.num_heads, cfg.num_kv_heads
        qkv = cp.ones((streams, (heads[0] + 2 * heads[1]) * cfg.head_dim), dtype=cp.float32)
        out["qk_norm_rope_ms_x_layers"] = cfg.num_layers * _gpu_ms(
            lambda: ops.qk_norm_rope(qkv, *heads, layer.q_norm, layer.k_norm, 1e-6, cos, cos)
        )
    gu = cp.ones((streams, 2 * cfg.intermediate_size), dtype=cp.float32)
    inter = cfg.intermediate_size
    out["silu_ms_x_layers"] = cfg.num_layers * _gpu_ms(
        lambda: ops.silu_mul(gu[:, :inter], gu[:, inter:])
    )
    out["add_ms_x_layers"] = 2 * cfg.num_layers * _gpu_ms(lambda: ops.add(h, h))
    return out


def _cached_model(spec: str, load: Any) -> Any:
    if spec not in _models:
        _models[spec] = load(spec, "cupy")
    return _models[spec]


def theirs(model_dir: str, streams: int, context: int, steps: int, mode: str) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM

    key = ("hf", model_dir)
    if key not in _models:
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
        _models[key] = m.to("cuda").eval()
    m = _models[key]
    vocab = m.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (streams, context), generator=g).to("cuda")
    with torch.inference_mode():
        if mode == "eager":
            return _hf_eager(m, ids, steps)
        return _hf_generate(m, ids, steps)


def _hf_eager(m: Any, ids: Any, steps: int) -> dict[str, float]:
    import torch

    torch.cuda.synchronize()
    t = time.perf_counter()
    out = m(ids, use_cache=True)
    torch.cuda.synchronize()
    prefill = time.perf_counter() - t
    past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        out = m(nxt, past_key_values=past, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        nxt.cpu()
        times.append(time.perf_counter() - t)
        past = out.past_key_values
    step = float(np.median(times[2:])) * 1e3
    return {"step_ms": step, "tok_s": ids.shape[0] / step * 1e3,
            "prefill_tok_s": ids.numel() / prefill}  # fmt: skip


def _hf_generate(m: Any, ids: Any, steps: int) -> dict[str, float]:
    import torch

    def gen(n: int) -> float:
        torch.cuda.synchronize()
        t = time.perf_counter()
        m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                   cache_implementation="static", pad_token_id=0)  # fmt: skip
        torch.cuda.synchronize()
        return time.perf_counter() - t

    short, long = 4, 4 + steps
    for n in (short, long, short, long):  # warm-ups of the same lengths (compiles)
        gen(n)
    t_short = min(gen(short) for _ in range(3))
    t_long = min(gen(long) for _ in range(3))
    step = (t_long - t_short) / steps * 1e3
    return {"step_ms": step, "tok_s": ids.shape[0] / step * 1e3}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="synthetic:qwen3-0.6b")
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8])
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--kv", default="bf16")
    p.add_argument("--transformers", nargs="*", default=[], choices=["eager", "static"])
    p.add_argument("--json", default=None)
    p.add_argument("--hbm-tb-s", type=float, default=0.0, help="the floor's bandwidth, TB/s")
    p.add_argument("--skip-ours", action="store_true", help="transformers' arms only")
    args = p.parse_args()
    from engine.model import synthetic
    from engine.model.config import ModelConfig

    model_dir = synthetic.resolve(args.model)
    cfg = ModelConfig.from_dir(model_dir)
    rows = []
    bytes_s = args.hbm_tb_s * 1e12 or device_bytes_s()
    for streams in args.streams:
        fl = floor_ms(cfg, streams, args.context, bytes_s=bytes_s)
        arms = [
            (
                f"ours (cupy, {'graph' if g else 'eager'})",
                lambda s=streams, g=g: ours(args.model, s, args.context, args.steps, args.kv, g),
            )
            for g in (False, True)
            if not args.skip_ours
        ]
        for mode in args.transformers:
            arms.append(
                (
                    f"transformers {mode}",
                    lambda s=streams, m=mode: theirs(
                        str(model_dir), s, args.context, args.steps, m
                    ),
                )
            )
        for name, fn in arms:
            r = {
                "engine": name,
                "streams": streams,
                "context": args.context,
                **fn(),
                "floor_ms": fl,
                "hbm_tb_s": bytes_s / 1e12,
            }
            r["x_floor"] = r["step_ms"] / fl
            rows.append(r)
            print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
