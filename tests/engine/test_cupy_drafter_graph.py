"""The MTP and block drafters' passes as captured graphs on cupy (engine/draft/mtp.py: a
round's waiting rows and its chained drafts in one `_fused_graph`; engine/draft/mtp_pass.py's
and block_pass.py's bodies, engine/ops/cupy_lanes.py `fixed_rows`): the same drafts, accepted
counts and replies as their eager passes, and the lane rows they leave are the same bytes
(marked `gpu`; skipped where cupy cannot run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY

MODELS = Path(__file__).parents[2] / "fixtures" / "models"
PROMPTS = ["Return the", "If the file does not exist,", "Create a new", "The name of the"]


def _run(model, graphs: bool, parallel: int, kv: str, k: int):  # type: ignore[no-untyped-def]
    from engine.config import EngineConfig
    from engine.draft.mtp import MtpDrafter
    from engine.lanes.engine import Engine
    from engine.lanes.request import Request
    from engine.model.tokenizer import Tokenizer

    model.ops.graphs = graphs
    tok = Tokenizer(MODELS / "tiny-qwen3")
    drafter = MtpDrafter(model)
    calls = []  # per call of a graph path: (its name, whether it took a graph)
    for name in ("_pass_graph", "_chain_graph", "_fused_graph"):
        real = getattr(drafter, name)

        def counted(*a, real=real, name=name):  # type: ignore[no-untyped-def]
            out = real(*a)
            calls.append((name, out is not None))
            return out

        setattr(drafter, name, counted)
    cfg = EngineConfig(context=128, parallel=parallel, kv=kv, kv_pages=64, draft_tokens=k)
    engine = Engine(model, cfg, drafter=drafter)
    for i, p in enumerate(PROMPTS):
        engine.submit(Request(id=str(i), prompt_ids=tok.encode(p), max_tokens=40, seed=i))
    done = engine.run()
    out = {s.req.id: (s.generated, s.drafted, s.accepted) for s in done}
    lanes = drafter.lanes
    live = lanes.scratch * lanes.rows  # every lane but the scratch one
    return out, calls, [lanes.k[0][:live].get(), lanes.v[0][:live].get()]


@pytest.mark.parametrize(
    "parallel,kv,k", [(1, "bf16", 4), (4, "fp8", 3), (3, "bf16", 7), (2, "bf16", 10)]
)
def test_mtp_passes_in_graphs_draft_what_eager_passes_draft(parallel, kv, k) -> None:  # type: ignore[no-untyped-def]
    from engine.model.loader import load_model

    model = load_model(MODELS / "tiny-qwen3", "cupy")
    eager, eager_graphs, eager_rows = _run(model, False, parallel, kv, k)
    fixed, fixed_graphs, fixed_rows = _run(model, True, parallel, kv, k)
    assert not any(took for _, took in eager_graphs)
    fused = [took for name, took in fixed_graphs if name == "_fused_graph"]
    assert fused and all(fused), "a round's drafts did not come from one fused graph"
    assert fixed == eager
    assert sum(a for _, _, a in fixed.values()) > 0  # drafts were accepted: the path ran
    for a, b in zip(eager_rows, fixed_rows, strict=True):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


def test_padding_rows_stay_in_the_scratch_lane() -> None:
    """fixed_rows places items in their lanes and pads into the scratch lane alone; items
    that do not fit get None (the eager pass then says what is wrong)."""
    from engine.ops.cupy_ops import CupyOps

    lanes = CupyOps(probe=False).new_lanes(1, 3, 16, 2, 64)
    placed = lanes.fixed_rows([(2, 5, 2), (0, 0, 1)], 8)
    assert placed["lane_slots"].tolist() == [37, 38, 0] + [48] * 5
    assert placed["lane_ptab"].tolist() == [2, 2, 0] + [3] * 5
    assert placed["lane_last"].tolist() == [5, 6, 0] + [0] * 5
    block = lanes.fixed_rows([(1, 4, 3)], 8, causal=False)  # a block sees all its rows
    assert block["lane_last"].tolist() == [6, 6, 6] + [0] * 5
    for bad in ([(3, 0, 1)], [(0, 15, 2)], [(0, 0, 9)]):
        assert lanes.fixed_rows(bad, 8) is None


def _two_layer_block(tmp_path: Path) -> Path:
    """The bundled block drafter with its layer repeated as a second one (scaled, so the two
    differ): the second layer's K/V of a block's rows depend on the first layer's attention,
    so they show which rows a block's rows saw."""
    import json
    import shutil

    from engine.model import safetensors_file

    src = MODELS / "tiny-qwen3-block"
    tensors = safetensors_file.load(src / "model.safetensors")
    for name in [n for n in tensors if n.startswith("layers.0.")]:
        scale = 0.5 if name.endswith("proj.weight") else 1.0
        tensors["layers.1." + name[len("layers.0.") :]] = tensors[name] * scale
    config = json.loads((src / "config.json").read_text())
    config["num_hidden_layers"] = 2
    out = tmp_path / "block2"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    safetensors_file.save(out / "model.safetensors", tensors)
    for extra in src.iterdir():
        if extra.name not in ("config.json", "model.safetensors"):
            shutil.copy(extra, out / extra.name)
    return out


def _run_block(model, drafter_dir: Path, graphs: bool, parallel: int, kv: str):  # type: ignore[no-untyped-def]
    import hashlib

    from engine.config import EngineConfig
    from engine.draft.block import BlockDrafter
    from engine.lanes.engine import Engine
    from engine.lanes.request import Request
    from engine.model.tokenizer import Tokenizer

    model.ops.graphs = graphs
    tok = Tokenizer(MODELS / "tiny-qwen3")
    drafter = BlockDrafter(model, str(drafter_dir))
    took = []  # per proposal: whether it ran as a graph
    snaps = []  # per proposal: a hash of the last layer's lane bytes after it
    real, real_many = drafter._propose_graph, drafter.propose_many

    def counted(*a):  # type: ignore[no-untyped-def]
        out = real(*a)
        took.append(out is not None)
        return out

    def snapped(*a):  # type: ignore[no-untyped-def]
        out = real_many(*a)
        # the live lanes only: a fixed-shape step's padding rows write the scratch lane after
        # them, which eager proposals never touch (at row tile 1, 3 blocks of 8 pad to 32)
        live = drafter.lanes.scratch * drafter.lanes.rows
        k, v = drafter.lanes.k[-1][:live].get(), drafter.lanes.v[-1][:live].get()
        snaps.append(hashlib.sha256(k.tobytes() + v.tobytes()).hexdigest())
        return out

    drafter._propose_graph, drafter.propose_many = counted, snapped
    cfg = EngineConfig(context=128, parallel=parallel, kv=kv, kv_pages=64, draft_tokens=4)
    engine = Engine(model, cfg, drafter=drafter)
    for i, p in enumerate(PROMPTS):
        engine.submit(Request(id=str(i), prompt_ids=tok.encode(p), max_tokens=40, seed=i))
    done = engine.run()
    out = {s.req.id: (s.generated, s.drafted, s.accepted) for s in done}
    return out, took, snaps


@pytest.mark.parametrize("parallel,kv", [(1, "bf16"), (4, "fp8"), (8, "bf16")])
def test_block_proposals_in_graphs_draft_what_eager_proposals_draft(parallel, kv, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The block drafter's proposal as one graph (engine/draft/block_pass.py): the same
    drafts, accepted counts and replies as its eager proposal, after every proposal the same
    lane bytes in a second drafter layer (which a block's rows' attention writes), and every
    proposal took the graph."""
    from engine.model.loader import load_model

    model = load_model(MODELS / "tiny-qwen3", "cupy")
    block = _two_layer_block(tmp_path)
    eager, eager_took, eager_snaps = _run_block(model, block, False, parallel, kv)
    fixed, fixed_took, fixed_snaps = _run_block(model, block, True, parallel, kv)
    assert not any(eager_took)
    assert fixed_took and all(fixed_took), "a proposal did not run as a graph"
    assert fixed == eager
    assert sum(a for _, _, a in fixed.values()) > 0
    assert fixed_snaps == eager_snaps
