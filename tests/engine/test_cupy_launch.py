"""Programmatic dependent launch in captured graphs (engine/ops/cupy_launch.py, ENGINE_CUPY_PDL):
the launches really take cuLaunchKernelEx inside a capture, and a step's bits are those of the
same graph without it and of the eager forward (marked `gpu`; skipped where cupy cannot run)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.engine.cupy_setup import GPU_ONLY

pytestmark = GPU_ONLY


@pytest.mark.parametrize("gemm", ["cublas", "mma"])
def test_a_step_graph_with_pdl_has_the_bits_without(tmp_path, monkeypatch, gemm) -> None:  # type: ignore[no-untyped-def]
    """Prompt and decode steps of 1 and 3 streams, bf16 and fp8 KV: graph with PDL == graph
    without == eager (logits, hidden rows), and only the PDL model's capture launched
    through cuLaunchKernelEx."""
    from engine.model.loader import load_model
    from engine.model.qwen3 import Segment, graph_step
    from engine.ops import cupy_launch

    monkeypatch.setenv("ENGINE_SYNTHETIC_DIR", str(tmp_path))
    monkeypatch.setenv("ENGINE_CUPY_GEMM", gemm)
    launches = []
    real = cupy_launch._launch_ex

    def counted():  # type: ignore[no-untyped-def]
        launches.append(1)
        return real()

    monkeypatch.setattr(cupy_launch, "_launch_ex", counted)
    models = {}
    for pdl in ("1", "0"):
        monkeypatch.setenv("ENGINE_CUPY_PDL", pdl)
        models[pdl] = load_model("fixtures/models/tiny-qwen3", "cupy")
    rng = np.random.default_rng(5)
    for kind in ("bf16", "fp8"):
        kvs = {p: [m.new_kv(24, 16, kind, lanes=3, lane_rows=128) for _ in range(2)]
               for p, m in models.items()}  # fmt: skip
        lanes = [[8 * i + j for j in range(8)] for i in range(3)]
        steps = [[Segment(rng.integers(0, 512, n), 0, lanes[i], np.asarray([n - 1]), lane=i)
                  for i, n in enumerate((5, 17, 40))]]  # fmt: skip
        starts = [5, 17, 40]
        for s in range(3):
            steps.append([Segment(rng.integers(0, 512, 1), starts[i] + s, lanes[i],
                                  np.asarray([0]), lane=i) for i in range(3)])  # fmt: skip
        for segs in steps:
            got = {}
            for p, m in models.items():
                before = len(launches)
                m.ops.graphs = True
                got[p] = graph_step(m, segs, kvs[p][0])
                assert got[p] is not None, "the step did not go through a graph"
                if p == "0":
                    assert len(launches) == before, "a launch took PDL with ENGINE_CUPY_PDL=0"
                m.ops.graphs = False
                got[p + "eager"] = m.forward(segs, kvs[p][1])
            for outs in zip(*got.values(), strict=True):
                first = outs[0]
                for o in outs[1:]:
                    assert o.logits.tobytes() == first.logits.tobytes(), (kind, gemm)
                    assert o.hidden.tobytes() == first.hidden.tobytes(), (kind, gemm)
    assert launches, "no launch went through cuLaunchKernelEx"
