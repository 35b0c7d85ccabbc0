#!/usr/bin/env bash
# One device call for the kernels that keep their bits and are opt-in until run on a GPU
# (docs/cupy.md, "A wide GEMM and thread-scored attention", "Early key copies"), run from the
# head's checkout:
#   bench/cupy_prompt_round.sh [BASE_REF] [HEAD_REF]      (defaults: e8fbb48, main)
# 1. their tests; 2. bench/cupy_wide.py (both GEMM kernels' GPU time); 3. bench/cupy_speed.py
# with all on (ENGINE_CUPY_WIDE_FROM=128 ENGINE_CUPY_ATTEND_THREAD_SCORES=1, the defaults since
# 2026-12-07, for prompt steps; ENGINE_CUPY_ATTEND_EARLY=1 for decode steps; the store where
# its tests pass) and all off, alternated (ROUND_SPEED_TURNS, default 1); 4. gpu.yaml
# BASE..HEAD with every GEMM wide, thread-scored tiles and early copies (not the store: with
# it on, split launches take the store's kernels, and the early copies of the default ones would
# go ungated) on the
# head, the tile threshold left at its default so that decode and verify launches are split
# (flags unset == main: their bits against the base's), beside the cupy suite. Wheels in .whl
# (gitpython for the gates) are installed first where present;
# the gates run in a clone of .carry/repo.bundle (or of this checkout). Logs under $OUT.
set -u
BASE=${1:-e8fbb48}
HEADREF=${2:-main}
OUT=${OUT:-/tmp/prompt-round}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=/tmp/syn
t0=$(date +%s); lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
SRC=.; [ -f .carry/repo.bundle ] && SRC=.carry/repo.bundle
rm -rf /tmp/repo && git clone -q "$SRC" /tmp/repo && (cd /tmp/repo && git branch -q "$HEADREF" "origin/$HEADREF" 2>/dev/null; git branch -q main origin/main 2>/dev/null; git log --oneline -1 "$HEADREF")
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')" &
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_wide.py tests/engine/test_cupy_attend_tile.py tests/engine/test_cupy_attend_plan.py tests/engine/test_cupy_epilogues.py tests/engine/test_cupy_options.py tests/engine/test_cupy_fusions.py "tests/engine/test_cupy_graphs.py::test_graph_decode_equals_eager" > $OUT/new-tests.log 2>&1
lap "new tests rc=$?: $(tail -1 $OUT/new-tests.log)"
grep -E "^(FAILED|E  )" $OUT/new-tests.log | head -10
wait
# the attention launch that makes the K/V write itself (ENGINE_CUPY_ATTEND_STORE=1): graph ==
# eager first; it joins the speed sides and the gates only if that holds
ENGINE_CUPY_ATTEND_STORE=1 timeout 150 python3 -m pytest -q -x -p no:cacheprovider "tests/engine/test_cupy_graphs.py::test_graph_decode_equals_eager" tests/engine/test_cupy_drafter_graph.py "tests/engine/test_cupy_fusions.py::test_attention_that_stores_equals_store_then_attend" > $OUT/store-tests.log 2>&1
store=$?; lap "store tests rc=$store: $(tail -1 $OUT/store-tests.log)"
grep -E "^(FAILED|E  )" $OUT/store-tests.log | head -6
STORE=""; SIDES="new old"; [ $store = 0 ] && STORE="ENGINE_CUPY_ATTEND_STORE=1" && SIDES="new old store"
# the store's test against a planted bug (ROUND_PLANT=0 skips it): each new key made from the
# row's own qkv row, so a verify run's rows see wrong earlier keys; only the store's module
# recompiles (the main module's source is unchanged: CuPy's cache). Must go red.
if [ "${ROUND_PLANT:-1}" = 1 ]; then
  rm -rf /tmp/plant && mkdir /tmp/plant && cp -r engine tests conftest.py pyproject.toml /tmp/plant/
  sed -i 's/const long long rj = r - (last - j);/const long long rj = r;/' /tmp/plant/engine/ops/cupy_attend_store.cu
  (cd /tmp/plant && timeout 120 python3 -m pytest -q -p no:cacheprovider "tests/engine/test_cupy_fusions.py::test_attention_that_stores_equals_store_then_attend" > $OUT/plant.log 2>&1)
  lap "planted rj = r: rc=$? (1: red, as it must be): $(tail -1 $OUT/plant.log)"
fi
if [ "${ROUND_WIDE_BENCH:-1}" = 1 ]; then  # 0 where the call is short: the prompt figures below cover it
  timeout 60 python3 bench/cupy_wide.py --rows 64 128 256 512 1024 --calls 30 > $OUT/wide-bench.log 2>&1
  lap "wide bench rc=$?"; tail -21 $OUT/wide-bench.log
fi
summ() { python3 -c "
import json,sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r=json.loads(l); print(r['engine'][6:11], r['streams'], round(r['step_ms'],3), round(r.get('replay_ms',0),3), int(r['prefill_tok_s']), end='; ')
" $1; }
for i in $(seq 1 "${ROUND_SPEED_TURNS:-1}"); do
  for side in $SIDES; do
    e="ENGINE_CUPY_WIDE_FROM=0 ENGINE_CUPY_ATTEND_THREAD_SCORES=0 ENGINE_CUPY_ATTEND_EARLY=0"; [ $side = new ] && e="ENGINE_CUPY_WIDE_FROM=128 ENGINE_CUPY_ATTEND_THREAD_SCORES=1 ENGINE_CUPY_ATTEND_EARLY=1"
    [ $side = store ] && e="ENGINE_CUPY_WIDE_FROM=128 ENGINE_CUPY_ATTEND_THREAD_SCORES=1 ENGINE_CUPY_ATTEND_EARLY=1 $STORE"
    env $e timeout 45 python3 bench/cupy_speed.py --streams 1 8 > $OUT/speed-$side-$i.log 2>&1
    lap "speed $side #$i: $(summ $OUT/speed-$side-$i.log)"
  done
done
# the gates and the suite get what is left of ROUND_BUDGET seconds (the device call's limit)
left=$(( ${ROUND_BUDGET:-590} - ($(date +%s) - t0) - 20 ))
[ "$left" -gt 250 ] && left=250
lap "gates and suite: ${left} s"
(cd /tmp/repo && env ENGINE_CUPY_WIDE_FROM=1 ENGINE_CUPY_ATTEND_THREAD_SCORES=1 ENGINE_CUPY_ATTEND_EARLY=1 timeout "$left" python3 -m gates run --matrix matrices/gpu.yaml --base "$BASE" --head "$HEADREF" --jobs 6 --no-lean --no-speed > $OUT/gates.log 2>&1; echo "gates rc=$?" >> $OUT/gates.log) &
g=$!
timeout "$((left - 10))" python3 -m pytest -q -p no:cacheprovider tests/engine tests/conformance -k "cupy or gemm or launch or graph or fusions or tile or epilogue or wide" > $OUT/tests.log 2>&1
lap "suite rc=$?: $(tail -1 $OUT/tests.log)"
grep -E "^FAILED" $OUT/tests.log | head -5
wait $g
lap "$(tail -2 $OUT/gates.log)"
(cd /tmp/repo/receipts && tar czf $OUT/receipts.tgz . ) 2>/dev/null
grep -hE "^\| (✅|❌)" /tmp/repo/receipts/*.gpu.md | head -10
