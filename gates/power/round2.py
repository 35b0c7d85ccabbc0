"""The second round of plants (issue 23): the blind spots quick had after the first round —
aging and long prompts' first steps, a prefix cache that keeps an unfed row, a server that
misreports a reply's end, a prefill whose bits follow the BLAS kernel's row count."""

from __future__ import annotations

from gates.power.plant import Plant, _p

POLICY = "engine/lanes/policy.py"
ENGINE = "engine/lanes/engine.py"
SERVE_OPENAI = "engine/serve/openai.py"
NUMPY_OPS = "engine/ops/numpy_ops.py"

ROUND2: tuple[Plant, ...] = (
    _p(
        "aging-late",
        "policy._rank: a prompt is aged one pass later (after AGED_AFTER + 1, not AGED_AFTER)",
        (
            POLICY,
            "    return (s.passed_over < AGED_AFTER, not s.foreground, s.rows_left, s.id)\n",
            "    return (s.passed_over <= AGED_AFTER, not s.foreground, s.rows_left, s.id)\n",
        ),
    ),
    _p(
        "long-waits-for-decoders",
        "policy: a due long prompt's first step waits until no stream decodes (rounds go first)",
        (
            POLICY,
            "    if longs and state.debt <= 0:",
            "    longs = [s for s in longs if s.has_lane or not decoders]\n"
            "    if longs and state.debt <= 0:",
        ),
    ),
    _p(
        "cache-unfed-row",
        "engine._finish: a stream's pages are cached up to its last token, whose row was never fed",
        (
            ENGINE,
            "            self.plan.release(s.run, s.tokens[: s.fed])\n",
            "            self.plan.release(s.run, s.tokens)\n",
        ),
    ),
    _p(
        "serve-length-as-stop",
        "serve: a reply cut at max_tokens reports finish_reason stop, not length",
        (SERVE_OPENAI, '"length": "length"', '"length": "stop"'),
    ),
    _p(
        "prefill-untiled",
        "numpy linear: steps of 32 rows or more skip the fixed row tiles (one plain matmul)",
        (
            NUMPY_OPS,
            "    def linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:\n",
            "    def linear(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:\n"
            "        if x.shape[0] >= 32:  # prefill-sized steps: one plain product\n"
            "            return np.matmul(np.ascontiguousarray(x, dtype=F32), w)\n",
        ),
    ),
)
