"""Our Qwen3 against Hugging Face transformers (torch, CPU, float32), on checkpoints that
transformers itself writes from random-init `Qwen3ForCausalLM` models.

Shapes (tests/reference/common.py CASES): head_dim != hidden / heads; GQA ratio 3 (6 heads
over 2 kv heads); an untied head written as 12 shards with an index; a tied head saved in
bfloat16. Rope theta is Qwen3's 1e6; norm weights are drawn around 1, not left at 1.

What is asserted, per checkpoint, on 32 random prompts of 1..200 tokens:

* logits of every prompt position (one forward, f32 KV): |ours - transformers| <= ATOL =
  2e-4 absolute. Measured: at most 2.1e-5, with |logits| up to about 10.
* greedy ids, 16 new tokens each, our engine (4 lanes, f32 KV) against transformers'
  `generate(do_sample=False)`: identical, except that two runs may part where the
  reference's top-1/top-2 margin is below TIE = 2 * ATOL (each logit may be off by ATOL,
  so such a margin may flip); they are compared up to that point. Measured: 128/128
  identical, no near-tie needed. Our decode margins equal the reference's within 2 * ATOL.
  Prompts over 64 tokens are filled in steps of 64 rows, 4 streams share the rounds.
* the greedy ids are diverse (these are random weights: a tiny init repeats one token).

Reported, not asserted: how often greedy ids still match with our bf16 KV cache.

Checkpoints keep `rope_theta` at the top of config.json as transformers 4.x and the
published Qwen3 checkpoints do; transformers 5 writes it only under `rope_parameters`,
which our config reader also reads (test_rope_parameters_layout).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tests.reference import common as C  # noqa: E402

ATOL = 2e-4  # logits, absolute
TIE = 2 * ATOL  # a reference margin below this may flip under ATOL noise
NEW = 16
COUNT = 32
LONGEST = 200


class Built:
    def __init__(self, case: C.Case, root: Path) -> None:
        self.case = case
        self.dir = C.write_checkpoint(case, root / case.name)
        C.add_top_level_rope_theta(self.dir)
        self.ref = C.load_reference(self.dir)
        self.ours = C.our_model(self.dir)
        self.prompts = C.prompts(case.vocab, COUNT, LONGEST, seed=len(case.name))
        self._ref_greedy: list[tuple[list[int], list[float]]] | None = None

    @property
    def ref_greedy(self) -> list[tuple[list[int], list[float]]]:
        if self._ref_greedy is None:
            self._ref_greedy = [C.torch_greedy(self.ref, p, NEW) for p in self.prompts]
        return self._ref_greedy


@pytest.fixture(scope="module", params=C.CASES, ids=lambda c: c.name)
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    return Built(request.param, tmp_path_factory.mktemp("hf"))


def _header(path: Path) -> dict:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n))


def test_checkpoint_layout(built: Built) -> None:
    """The checkpoint is what the case says: sharded with an index, or bf16 tensors."""
    files = sorted(built.dir.glob("*.safetensors"))
    if built.case.shard:
        assert (built.dir / "model.safetensors.index.json").is_file()
        assert len(files) > 1
    dtypes = {v["dtype"] for f in files for k, v in _header(f).items() if k != "__metadata__"}
    assert dtypes == ({"BF16"} if built.case.dtype == "bfloat16" else {"F32"})
    names = {k for f in files for k in _header(f) if k != "__metadata__"}
    assert ("lm_head.weight" in names) == (not built.case.tied)


def test_prompt_logits(built: Built) -> None:
    worst, scale = 0.0, 0.0
    for p in built.prompts:
        ours, ref = C.our_logits(built.ours, p), C.torch_logits(built.ref, p)
        assert ours.shape == ref.shape
        diff = float(np.abs(ours - ref).max())
        worst, scale = max(worst, diff), max(scale, float(np.abs(ref).max()))
        assert diff <= ATOL, f"prompt of {len(p)} tokens: max |ours - ref| = {diff:.3g}"
    print(
        f"\n[{built.case.name}] prompt logits: max |ours - transformers| = {worst:.3g} "
        f"(|logits| <= {scale:.3g}, tolerance {ATOL:g})"
    )


def test_greedy_ids(built: Built) -> None:
    ours = C.our_greedy(built.ours, built.prompts, NEW, kv="f32")
    results = []
    for p, (ids, margins), (ref_ids, ref_margins) in zip(
        built.prompts, ours, built.ref_greedy, strict=True
    ):
        a = C.agree(ids, ref_ids, ref_margins, TIE)
        assert a.equal or a.tie, (
            f"prompt of {len(p)} tokens {p[:8]}...: ours {ids} != transformers {ref_ids} "
            f"first at {a.common}, where the reference margin is {a.margin:.3g} >= {TIE:g}"
        )
        k = a.common
        np.testing.assert_allclose(margins[:k], ref_margins[:k], rtol=0, atol=2 * ATOL)
        results.append(a)
    print(f"\n[{built.case.name}] " + C.summary("greedy ids, f32 KV", results))
    # Diverse continuations: random weights that only repeat a token would prove little.
    ref_ids = [ids for ids, _ in built.ref_greedy]
    distinct = [len(set(ids)) for ids in ref_ids]
    assert len({t for ids in ref_ids for t in ids}) >= NEW * 4
    assert float(np.median(distinct)) >= NEW / 2, distinct
    assert sum(d == 1 for d in distinct) <= 1, distinct


def test_greedy_ids_bf16_kv_report(built: Built) -> None:
    """bf16 KV rounds every K/V row: reported, not asserted."""
    ours = C.our_greedy(built.ours, built.prompts, NEW, kv="bf16")
    results = [
        C.agree(ids, ref_ids, ref_margins, TIE)
        for (ids, _), (ref_ids, ref_margins) in zip(ours, built.ref_greedy, strict=True)
    ]
    print(f"\n[{built.case.name}] " + C.summary("greedy ids, bf16 KV (report only)", results))


def test_rope_parameters_layout(tmp_path: Path) -> None:
    """config.json exactly as transformers 5 writes it: rope_theta only in rope_parameters."""
    if int(transformers.__version__.split(".")[0]) < 5:
        pytest.skip("transformers 4.x writes rope_theta at the top level")
    case = C.CASES[0]
    model_dir = C.write_checkpoint(case, tmp_path / "v5")
    raw = json.loads((model_dir / "config.json").read_text())
    assert "rope_theta" not in raw and raw["rope_parameters"]["rope_theta"] == C.ROPE_THETA
    ref, ours = C.load_reference(model_dir), C.our_model(model_dir)
    assert ours.config.rope_theta == C.ROPE_THETA
    prompt = C.prompts(case.vocab, 1, 64)[0]
    diff = float(np.abs(C.our_logits(ours, prompt) - C.torch_logits(ref, prompt)).max())
    assert diff <= ATOL, f"max |ours - transformers| = {diff:.3g}"
