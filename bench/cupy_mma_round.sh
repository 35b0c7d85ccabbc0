#!/usr/bin/env bash
# One device call for the tensor-core GEMM (ENGINE_CUPY_GEMM=mma) against cuBLAS:
#   bench/cupy_mma_round.sh OUT_DIR
# 1. tests/engine/test_cupy_gemm.py (own and mma: a row's bits at every row count);
# 2. bench/cupy_gemm.py: every weight of synthetic:qwen3-0.6b at 1, 8, 64 and 512 rows;
# 3. bench/cupy_speed.py at 1 and 8 streams (decode step, prefill) with each GEMM;
# 4. bench/cupy_drafters.sh on the trained tiny fixture with each GEMM (MMA_DRAFTERS=0 skips);
# 5. the cupy tests and conformance suite with ENGINE_CUPY_GEMM=mma (MMA_TESTS=0 skips).
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
lap "synthetic weights ready"
python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_gemm.py >"$OUT/gemm-tests.log" 2>&1
lap "gemm tests rc=$?: $(tail -1 "$OUT/gemm-tests.log")"
grep -m5 "Error\|assert" "$OUT/gemm-tests.log"
python3 bench/cupy_gemm.py --rows 1 8 64 512 --json "$OUT/gemm.json" 2>&1 | tee "$OUT/gemm.log"
lap "gemm bench"
for g in ${GEMMS:-cublas mma}; do
    ENGINE_CUPY_GEMM=$g python3 bench/cupy_speed.py --streams 1 8 --json "$OUT/speed-$g.json" \
        >"$OUT/speed-$g.log" 2>&1
    lap "speed $g rc=$?"
    python3 - "$OUT/speed-$g.log" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        r = json.loads(line)
        print(f"  {r['engine']:22} streams {r['streams']}: step {r['step_ms']:.3f} ms"
              f" replay {r.get('replay_ms', float('nan')):.3f} prefill {r.get('prefill_tok_s', 0):,.0f} tok/s")
PY
done
if [ "${MMA_DRAFTERS:-1}" = 1 ]; then  # the MTP drafter's gain on the trained fixture
    for g in ${GEMMS:-cublas mma}; do
        ENGINE_CUPY_GEMM=$g MODELS=fixtures/models/tiny-qwen3 SIDES=head REPEATS=2 \
            bench/cupy_drafters.sh . "$OUT/drafters-$g" 2>&1 | tail -4
        lap "drafters $g"
    done
fi
if [ "${MMA_TESTS:-1}" = 1 ]; then
    ENGINE_CUPY_GEMM=mma python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_backend.py \
        tests/engine/test_cupy_greedy.py tests/conformance -k cupy >"$OUT/mma-tests.log" 2>&1
    lap "cupy tests with mma rc=$?: $(tail -1 "$OUT/mma-tests.log")"
    grep -m10 "^FAILED\|^ERROR" "$OUT/mma-tests.log"
fi
