"""The power check's catalog, as data: each plant is a bug class (or a no-op change) and the
exact text substitutions that make it. Every ``old`` must occur exactly once in its file."""

from __future__ import annotations

from pathlib import Path

from gates.power.plant import Edit, Plant, _p  # noqa: F401  (Edit: re-exported)
from gates.power.round2 import ROUND2

POLICY = "engine/lanes/policy.py"
ENGINE = "engine/lanes/engine.py"
PLAN = "engine/kv/plan.py"
CODEC = "engine/kv/codec.py"
SAMPLING = "engine/lanes/sampling.py"
MTP = "engine/draft/mtp.py"
NUMPY_OPS = "engine/ops/numpy_ops.py"
QWEN3 = "engine/model/qwen3.py"
SERVE_OPENAI = "engine/serve/openai.py"
SERVE_WORKER = "engine/serve/worker.py"
MOE = "engine/ops/moe.py"


PLANTS: tuple[Plant, ...] = (
    _p(
        "sched-burst-starves",
        "policy: no cap on shorts per loop, a burst of short prompts runs with no round between",
        (
            POLICY,
            "    if shorts and state.shorts_in_loop < lanes:\n",
            "    if shorts:\n",
        ),
    ),
    _p(
        "sched-short-behind-debt",
        "policy: shorts ranked together with longs; an aged long wins, shorts wait out the debt",
        (
            POLICY,
            "    if shorts and state.shorts_in_loop < lanes:\n"
            '        return Action("short", min(shorts, key=_rank).id)\n',
            "    if shorts and state.shorts_in_loop < lanes:\n"
            "        best = min(shorts + longs, key=_rank)\n"
            '        if best.phase == "short":\n'
            '            return Action("short", best.id)\n'
            "        if state.debt <= 0 or not decoders:\n"
            '            return Action("long", best.id)\n'
            '        return Action("round")\n',
        ),
    ),
    _p(
        "sched-debt-outlives-decoders",
        "policy: decode debt is not cleared when no stream decodes",
        (POLICY, "    if not decoders:\n        state.debt = 0.0\n", ""),
    ),
    _p(
        "cancel-leaks-page",
        "engine._finish: a cancelled stream keeps its lane and pages",
        (
            ENGINE,
            "        if s.run is not None:\n            self.drafter.release(s)\n",
            '        if s.run is not None and reason != "cancelled":\n'
            "            self.drafter.release(s)\n",
        ),
    ),
    _p(
        "evict-stale-prefix",
        "plan._take_page: a cached page taken for reuse keeps its hash entry",
        (
            PLAN,
            "                del self.cache[key]\n                del self.page_key[page]\n",
            "                self.page_key.pop(page, None)\n",
        ),
    ),
    _p(
        "prefix-hash-unchained",
        "plan._chain_keys: a page's key covers its own tokens only, not the chain before it",
        (
            PLAN,
            "            h + str(list(tokens[i * page_rows : (i + 1) * page_rows])).encode()\n",
            "            str(list(tokens[i * page_rows : (i + 1) * page_rows])).encode()\n",
        ),
    ),
    _p(
        "sampling-not-positional",
        "engine._emit: seeded sampling keyed on the generated index, not the absolute position",
        (
            ENGINE,
            "s.req.seed, len(s.tokens) + i)",
            "s.req.seed, len(s.generated) + i)",
        ),
    ),
    _p(
        "drafter-absorbs-extra-row",
        "mtp.absorb: one row past the accepted drafts is absorbed (tokens exact, acceptance drops)",
        (
            MTP,
            "out.taps[self.taps[0]][: accepted + 1])",
            "out.taps[self.taps[0]][: accepted + 2])",
        ),
    ),
    _p(
        "linear-row-count-bits",
        "numpy linear: steps of more than 3 tiles split the reduction in two (bits follow rows)",
        (
            NUMPY_OPS,
            "        tiles, m = self._tiles(x)\n"
            "        return np.matmul(tiles, w).reshape(-1, w.shape[1])[:m]\n",
            "        tiles, m = self._tiles(x)\n"
            "        if len(tiles) > 3:  # big steps: two half-K products (cache friendlier)\n"
            "            k = w.shape[0] // 2\n"
            "            out = np.matmul(tiles[..., :k], w[:k])\n"
            "            out += np.matmul(tiles[..., k:], w[k:])\n"
            "            return out.reshape(-1, w.shape[1])[:m]\n"
            "        return np.matmul(tiles, w).reshape(-1, w.shape[1])[:m]\n",
        ),
    ),
    _p(
        "rope-long-positions",
        "rope_tables: angles of positions >= 512 rounded to float16",
        (
            QWEN3,
            "    angles = pos[:, None] * inv_freq[None, :]\n",
            "    angles = pos[:, None] * inv_freq[None, :]\n"
            "    angles[512:] = angles[512:].astype(np.float16)  # long: a smaller table\n",
        ),
    ),
    _p(
        "fp8-scale-off",
        "fp8 codec: scale exponent one step too big for rows whose amax mantissa is >= 0.75",
        (
            CODEC,
            "    _, exp = np.frexp(amax)\n    exp = np.clip(exp - 8, -128, 127)",
            "    mant, exp = np.frexp(amax)\n"
            "    exp = np.clip(exp - 8 + (mant >= 0.75), -128, 127)",
        ),
    ),
    _p(
        "stop-ids-ignored",
        "engine._emit: request stop_ids no longer stop generation (eos still does)",
        (
            ENGINE,
            "        stops = set(eos) | set(s.req.stop_ids)\n",
            "        stops = set(eos)\n",
        ),
    ),
    _p(
        "embed-wrong-row",
        "engine._prompt_step: an embed takes the first row of its last step, not the last row",
        (
            ENGINE,
            "            np.asarray([n - 1] if last else [], dtype=np.int64),\n",
            "            np.asarray(\n"
            '                [n - 1 if s.req.kind == "complete" else 0] if last else [],\n'
            "                dtype=np.int64,\n"
            "            ),\n",
        ),
    ),
    _p(
        "background-first",
        "policy._rank: background priority ranked ahead of foreground",
        (
            POLICY,
            "    return (s.passed_over < AGED_AFTER, not s.foreground, s.rows_left, s.id)\n",
            "    return (s.passed_over < AGED_AFTER, s.foreground, s.rows_left, s.id)\n",
        ),
    ),
    _p(
        "attention-merge-order",
        "numpy attention: key blocks merged right to left (bits change from 3 blocks, >128 keys)",
        (
            NUMPY_OPS,
            "        total = block_sums[:, :, :, 0].copy()\n"
            "        acc = pv[:, :, :, 0].copy()\n"
            "        for j in range(1, nb):\n",
            "        total = block_sums[:, :, :, nb - 1].copy()\n"
            "        acc = pv[:, :, :, nb - 1].copy()\n"
            "        for j in range(nb - 2, -1, -1):\n",
        ),
    ),
    _p(
        "drafter-state-leak",
        "engine._finish: the drafter's per-stream state is never released",
        (ENGINE, "            self.drafter.release(s)\n", ""),
    ),
    _p(
        "resume-off-by-one",
        "engine._prompt_step: a resumed prompt feeds from one row past its reused rows",
        (
            ENGINE,
            "            s.fed = s.run.reused_rows\n",
            "            s.fed = s.run.reused_rows + (s.run.reused_rows > 0)\n",
        ),
    ),
    _p(
        "serve-seed-misread",
        "serve: the request's seed is read as `random_seed`, so sampled requests get seed 0",
        (
            SERVE_OPENAI,
            '    for key in ("temperature", "seed", "priority",',
            '    for key in ("temperature", "random_seed", "priority",',
        ),
    ),
    _p(
        "serve-stream-drops-last",
        "serve worker: tokens of a stream's last step are not published (streams lose them)",
        (
            SERVE_WORKER,
            "            end = cut[0] if cut else len(s.generated)\n",
            "            end = start if s.done else (cut[0] if cut else len(s.generated))\n",
        ),
    ),
    *ROUND2,
    # ---- mixture of experts (engine/ops/moe.py; quick's tiny-qwen3-moe arms) -----------
    _p(
        "moe-tie-to-higher-id",
        "moe.route: equal router probabilities rank the higher expert id first",
        (
            MOE,
            '    ids = np.argsort(-p, axis=1, kind="stable")[:, :top_k]\n',
            "    ids = (p.shape[1] - 1 - np.argsort(-p[:, ::-1], axis=1, kind='stable'))"
            "[:, :top_k]\n",
        ),
    ),
    _p(
        "moe-gemm-by-row-count",
        "moe.moe_ffn: an expert's gate|up as one matmul of its rows (gemv at 1 row, gemm at more)",
        (
            MOE,
            "        gu = ops.expert_linear(ops.take_rows(x, rows), moe.gate_up[e])\n",
            "        gu = ops.take_rows(x, rows) @ moe.gate_up[e]\n",
        ),
    ),
    _p(
        "moe-sum-in-arrival-order",
        "moe.moe_ffn: a row's expert outputs summed as experts arrive (busiest first), not by rank",
        (
            MOE,
            "    y = ops.concat_rows(outs)\n",
            "    y = ops.concat_rows(outs)\n"
            "    busiest = sorted(groups, key=lambda g: -len(g[1]))\n"
            "    arrival = {e: i for i, (e, _) in enumerate(busiest)}\n"
            '    order = np.argsort(np.vectorize(arrival.get)(ids), axis=1, kind="stable")\n'
            "    where, w = np.take_along_axis(where, order, 1), np.take_along_axis(w, order, 1)\n",
        ),
    ),
    # ---- no-op changes: the gates must stay quiet -------------------------------------
    _p(
        "noop-docstring",
        "engine.step: docstring reworded",
        (
            ENGINE,
            '        """Do one action (a prompt step or a round). False once nothing is left."""\n',
            '        """Run one action, a prompt step or a round; False when nothing is left."""\n',
        ),
        noop=True,
    ),
    _p(
        "noop-rename",
        "sampling.sample: local `gumbel` renamed to `noise`",
        (SAMPLING, "    gumbel = -np.log(", "    noise = -np.log("),
        (SAMPLING, "/ temperature + gumbel))", "/ temperature + noise))"),
        noop=True,
    ),
    _p(
        "noop-comprehension",
        "plan.pages_in_use: generator sum rewritten as len of a list comprehension",
        (
            PLAN,
            "        return sum(1 for r in self.refs if r > 0)\n",
            "        return len([r for r in self.refs if r > 0])\n",
        ),
        noop=True,
    ),
    _p(
        "noop-refactor-open",
        "plan.open: refcount loop over reused pages, loop variable renamed and += spelled out",
        (
            PLAN,
            "            for page in run.pages:\n                self.refs[page] += 1\n"
            "            while len(run.pages)",
            "            for p in run.pages:\n                self.refs[p] = self.refs[p] + 1\n"
            "            while len(run.pages)",
        ),
        noop=True,
    ),
)


def by_name() -> dict[str, Plant]:
    return {p.name: p for p in PLANTS}


def select(only: str | None) -> list[Plant]:
    """The plants named in a comma-separated list (all of them for None); ValueError on an
    unknown name."""
    if not only:
        return list(PLANTS)
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = by_name()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown plant(s): {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names]


def anchor_problems(plant: Plant, root: Path) -> list[str]:
    """Why the plant does not apply to the tree at `root` (empty: it applies)."""
    problems = []
    texts: dict[str, str] = {}
    for e in plant.edits:
        path = root / e.file
        if e.file not in texts:
            if not path.is_file():
                problems.append(f"{e.file}: no such file")
                continue
            texts[e.file] = path.read_text()
        n = texts[e.file].count(e.old)
        if n != 1:
            first = e.old.strip().splitlines()[0] if e.old.strip() else repr(e.old)
            problems.append(f"{e.file}: anchor {first!r} found {n} times (expected once)")
            continue
        texts[e.file] = texts[e.file].replace(e.old, e.new, 1)
    return problems


def apply(plant: Plant, root: Path) -> list[str]:
    """Apply the plant's edits under `root` (all or none); returns the changed files.
    ValueError when an anchor does not occur exactly once."""
    problems = anchor_problems(plant, root)
    if problems:
        raise ValueError("; ".join(problems))
    texts: dict[str, str] = {}
    for e in plant.edits:
        text = texts.get(e.file) or (root / e.file).read_text()
        texts[e.file] = text.replace(e.old, e.new, 1)
    for f, text in texts.items():
        (root / f).write_text(text)
    return sorted(texts)
