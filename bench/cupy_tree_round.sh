#!/usr/bin/env bash
# One device call for a cupy change meant to keep every bit, head tree against a base commit:
#   OUT=... bench/cupy_tree_round.sh BASE_REF [HEAD_REF]     (HEAD_REF default main)
# 1. the cupy tests of this checkout (the head), while the base's kernels compile beside them;
# 2. bench/cupy_speed.py --streams 1 8, base then head, ROUND_SPEED_TURNS times (default 2),
#    each in its own process (graph replay and prefill);
# 3. `python -m engine bench --backend cupy --parallel 1,8` on the head (ROUND_BENCH=0 skips);
# 4. gpu.yaml BASE..HEAD without the speed look (flags unset == main: the base's bits), beside
#    the cupy suite, in what is left of ROUND_BUDGET seconds (default 560; ROUND_GATES=0 skips);
# 5. bench/cupy_timeline.py on the head where ROUND_TIMELINE=1 (kernels in the step's graph);
# 6. bench/cupy_op_profile.py --gpu-only on the head (ROUND_PROFILE=0 skips).
# HEAD_ENV (e.g. ENGINE_CUPY_ATTEND_STORE=1) is set for the head's speed runs, the suite and
# the gates. The gates give it to both sides, so for an option's A/B take as BASE a commit from
# before the option (which ignores the variable): with BASE == HEAD_REF both sides would run it.
# ALT_ENV (e.g. "ENGINE_CUPY_ATTEND_STORE=1;ENGINE_CUPY_GRAPHS=0", settings over HEAD_ENV's)
# adds a speed arm each turn for each ';'-separated set: the head with it (speed only).
# The base and the gates' trees come from .carry/repo.bundle where present (else this
# checkout's .git); wheels in .whl (gitpython for the gates) are installed first. Logs in $OUT.
set -u
BASE=$1
HEADREF=${2:-main}
HEAD_ENV=${HEAD_ENV:-ENGINE_ROUND_SIDE=head}
OUT=${OUT:-/tmp/tree-round}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=/tmp/syn
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SRC=.; [ -f .carry/repo.bundle ] && SRC=.carry/repo.bundle
rm -rf /tmp/repo /tmp/base && git clone -q "$SRC" /tmp/repo && git clone -q "$SRC" /tmp/base
(cd /tmp/repo && git branch -q "$HEADREF" "origin/$HEADREF" 2>/dev/null; git log --oneline -1 "$HEADREF")
(cd /tmp/base && git checkout -q "$BASE" && git log --oneline -1)
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
M="--model synthetic:qwen3-0.6b"
(cd /tmp/base && python3 bench/cupy_speed.py --streams 1 > "$OUT/base-warm.log" 2>&1) &
timeout 330 python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_attend_tile.py \
    tests/engine/test_cupy_fusions.py tests/engine/test_cupy_attend_plan.py \
    tests/engine/test_cupy_epilogues.py tests/engine/test_cupy_gemm.py \
    "tests/engine/test_cupy_graphs.py::test_graph_decode_equals_eager" \
    "tests/engine/test_cupy_backend.py::test_fused_launches_equal_the_ops_they_replace" \
    > "$OUT/tests.log" 2>&1
lap "head tests rc=$?: $(tail -1 "$OUT/tests.log")"
grep -m8 -E "^(FAILED|ERROR)" "$OUT/tests.log"
wait
summ() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{') and 'graph' in l:
        r = json.loads(l); print(f\"{r['streams']}: {r['replay_ms']:.3f} ms {r['prefill_tok_s']:,.0f} tok/s\", end='; ')
" "$1"; }
for i in $(seq 1 "${ROUND_SPEED_TURNS:-2}"); do
    (cd /tmp/base && timeout 60 python3 bench/cupy_speed.py --streams 1 8 > "$OUT/speed-base-$i.log" 2>&1)
    lap "base #$i $(summ "$OUT/speed-base-$i.log")"
    env $HEAD_ENV timeout 60 python3 bench/cupy_speed.py --streams 1 8 > "$OUT/speed-head-$i.log" 2>&1
    lap "head #$i $(summ "$OUT/speed-head-$i.log")"
    IFS=';' read -ra ALTS <<< "${ALT_ENV:-}"
    for j in "${!ALTS[@]}"; do
        env $HEAD_ENV ${ALTS[$j]} timeout 60 python3 bench/cupy_speed.py --streams 1 8 > "$OUT/speed-alt$j-$i.log" 2>&1
        lap "head ${ALTS[$j]} #$i $(summ "$OUT/speed-alt$j-$i.log")"
    done
done
if [ "${ROUND_BENCH:-1}" = 1 ]; then
    env $HEAD_ENV timeout 90 python3 -m engine bench --backend cupy $M --parallel 1,8 --prompt-tokens 16 \
        --gen-tokens 64 --repeats 3 > "$OUT/bench.log" 2>&1
    lap "engine bench rc=$?"; tail -6 "$OUT/bench.log"
fi
if [ "${ROUND_GATES:-1}" = 1 ]; then
    left=$(( ${ROUND_BUDGET:-560} - ($(date +%s) - t0) - 40 ))
    [ "$left" -gt 260 ] && left=260
    lap "gates and suite: $left s"
    (cd /tmp/repo && env $HEAD_ENV timeout "$left" python3 -m gates run --matrix matrices/gpu.yaml --base "$BASE" \
        --head "$HEADREF" --jobs 6 --no-lean --no-speed > "$OUT/gates.log" 2>&1; echo "gates rc=$?" >> "$OUT/gates.log") &
    g=$!
    env $HEAD_ENV timeout "$((left - 10))" python3 -m pytest -q -p no:cacheprovider tests/engine tests/conformance \
        -k "cupy or gemm or launch or graph or fusions or tile or epilogue or wide" > "$OUT/suite.log" 2>&1
    lap "suite rc=$?: $(tail -1 "$OUT/suite.log")"
    grep -m5 "^FAILED" "$OUT/suite.log"
    wait $g
    lap "$(tail -2 "$OUT/gates.log")"
    (cd /tmp/repo/receipts && tar czf "$OUT/receipts.tgz" .) 2>/dev/null
    grep -hE "^\| (✅|❌)" /tmp/repo/receipts/*.gpu.md | head -8
fi
if [ "${ROUND_TIMELINE:-0}" = 1 ]; then
    env $HEAD_ENV timeout 90 python3 bench/cupy_timeline.py --streams 1 8 > "$OUT/timeline.log" 2>&1
    lap "timeline rc=$?"; grep -A14 "^## " "$OUT/timeline.log"
fi
if [ "${ROUND_PROFILE:-1}" = 1 ]; then
    env $HEAD_ENV timeout 60 python3 bench/cupy_op_profile.py --gpu-only --streams 1 8 > "$OUT/profile.log" 2>&1
    lap "profile rc=$?"; grep -A3 "prompt of\|decode step" "$OUT/profile.log"
fi
