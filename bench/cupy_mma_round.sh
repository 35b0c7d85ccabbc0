#!/usr/bin/env bash
# One device call for the tensor-core GEMM (ENGINE_CUPY_GEMM=mma) and programmatic dependent
# launch (ENGINE_CUPY_PDL) against cuBLAS and plain launches:
#   bench/cupy_mma_round.sh OUT_DIR
# 1. tests/engine/test_cupy_gemm.py and test_cupy_launch.py (MMA_TESTS=0 skips 1, 4 and 5);
# 2. with PLANTS=1, the plants those tests must catch, each in a copy of the tree;
# 3. bench/cupy_gemm.py (MMA_GEMMS=0 skips): every weight of synthetic:qwen3-0.6b at 1, 8,
#    64 and 512 rows;
# 4. bench/cupy_speed.py at 1 and 8 streams (decode step, prefill) for each side of SIDES
#    (comma-joined ENGINE_* settings; "-" for none);
# 5. bench/cupy_drafters.sh on the trained tiny fixture (MMA_DRAFTERS=1 runs it);
# 6. the cupy tests and conformance suite with TEST_ENV (default ENGINE_CUPY_GEMM=mma).
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
lap "synthetic weights ready"
if [ "${MMA_TESTS:-1}" = 1 ]; then
    python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_gemm.py \
        tests/engine/test_cupy_launch.py >"$OUT/gemm-tests.log" 2>&1
    lap "gemm and launch tests rc=$?: $(tail -1 "$OUT/gemm-tests.log")"
    grep -m5 "Error\|^FAILED" "$OUT/gemm-tests.log"
fi
plant() {  # plant NAME FILE SED_EXPR TEST: the test must fail on a copy with the plant
    rm -rf /tmp/plant && cp -r . /tmp/plant && sed -i "$3" "/tmp/plant/$2"
    if cmp -s "$2" "/tmp/plant/$2"; then echo "plant $1: the sed changed nothing"; return; fi
    (cd /tmp/plant && python3 -m pytest -q -p no:cacheprovider "$4") >"$OUT/plant-$1.log" 2>&1
    lap "plant $1 rc=$? (want 1): $(tail -1 "$OUT/plant-$1.log")"
}
if [ "${PLANTS:-0}" = 1 ]; then
    plant no-wait engine/ops/cupy_kernels.cu 's/"griddepcontrol.wait;\\n\\t/"/' \
        tests/engine/test_cupy_launch.py
    plant slices-by-rows engine/ops/cupy_gemm.py \
        's/slices = min(MMA_MAX_SLICES, /slices = min(MMA_MAX_SLICES if m > 8 else 4, /' \
        tests/engine/test_cupy_gemm.py
fi
if [ "${MMA_GEMMS:-1}" = 1 ]; then
    python3 bench/cupy_gemm.py --rows 1 8 64 512 --json "$OUT/gemm.json" 2>&1 | tee "$OUT/gemm.log"
    lap "gemm bench"
fi
for side in ${SIDES:-ENGINE_CUPY_GEMM=cublas ENGINE_CUPY_GEMM=mma}; do
    envs=$(echo "$side" | tr ',' ' ' | sed 's/^-$//')
    tag=$(echo "$side" | tr ',=' '_-')
    env $envs python3 bench/cupy_speed.py --streams 1 8 --json "$OUT/speed-$tag.json" \
        >"$OUT/speed-$tag.log" 2>&1
    lap "speed $side rc=$?"
    python3 - "$OUT/speed-$tag.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(f"  {r['engine']:22} streams {r['streams']}: step {r['step_ms']:.3f} ms"
              f" replay {r.get('replay_ms', float('nan')):.3f} prefill {r.get('prefill_tok_s', 0):,.0f} tok/s")
PY
done
if [ "${MMA_DRAFTERS:-0}" = 1 ]; then  # the MTP drafter's gain on the trained fixture
    for side in ${DRAFTER_SIDES:--}; do
        envs=$(echo "$side" | tr ',' ' ' | sed 's/^-$//')
        env $envs MODELS=fixtures/models/tiny-qwen3 SIDES=head REPEATS=2 \
            bench/cupy_drafters.sh . "$OUT/drafters-$(echo "$side" | tr ',=' '_-')" 2>&1 | tail -4
        lap "drafters $side"
    done
fi
if [ "${MMA_TESTS:-1}" = 1 ]; then
    env ${TEST_ENV:-ENGINE_CUPY_GEMM=mma} python3 -m pytest -q -p no:cacheprovider \
        tests/engine/test_cupy_backend.py tests/engine/test_cupy_greedy.py tests/conformance \
        -k cupy >"$OUT/cupy-tests.log" 2>&1
    lap "cupy tests (${TEST_ENV:-ENGINE_CUPY_GEMM=mma}) rc=$?: $(tail -1 "$OUT/cupy-tests.log")"
    grep -m10 "^FAILED\|^ERROR" "$OUT/cupy-tests.log"
fi
