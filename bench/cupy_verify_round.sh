#!/usr/bin/env bash
# One device call that checks a cupy change end to end:
#   bench/cupy_verify_round.sh OUT_DIR BASE_REV [SIDE ...]
# 1. the cupy tests and conformance suite at the defaults;
# 2. bench/cupy_speed.py at 1 and 8 streams (graph replay, prefill) for each SIDE (comma-joined
#    ENGINE_* settings; "-" for the defaults), the sides alternated twice in separate processes;
# 3. python -m gates run --matrix matrices/gpu.yaml --base BASE_REV --head HEAD (no speed look):
#    a change meant to keep the bits must hold "flags unset == main" (needs a git checkout and
#    GitPython; on the device machine install it from carried wheels first).
# e.g. the split attention's head grouping against the commit before it:
#   bench/cupy_verify_round.sh /tmp/out ef606a9 - ENGINE_CUPY_ATTEND_HEADS_FROM=1000000 \
#       ENGINE_CUPY_ATTEND_HEADS_FROM=0
set -u
OUT=$1
BASE=$2
shift 2
SIDES=("$@")
[ ${#SIDES[@]} -eq 0 ] && SIDES=(-)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_*.py tests/conformance \
    -k "cupy or gemm or launch or graph or fusions or tile" >"$OUT/cupy-tests.log" 2>&1
lap "cupy tests rc=$?: $(tail -1 "$OUT/cupy-tests.log")"
grep -m10 "^FAILED\|^ERROR" "$OUT/cupy-tests.log"
for round in 1 2; do
    for side in "${SIDES[@]}"; do
        envs=$([ "$side" = - ] && echo "X=1" || echo "$side" | tr ',' ' ')
        env $envs python3 bench/cupy_speed.py --streams 1 8 >"$OUT/speed.log" 2>&1
        echo "round $round, $side: $(grep '^{' "$OUT/speed.log" | grep graph | python3 -c "
import json, sys
print(' | '.join(f\"{r['streams']} streams: replay {r['replay_ms']:.3f} ms, prefill \"
                 f\"{r['prefill_tok_s']:,.0f} tok/s\" for r in map(json.loads, sys.stdin)))")"
    done
done
lap "speed"
python3 -m gates run --matrix matrices/gpu.yaml --base "$BASE" --head HEAD --jobs 8 --no-lean \
    --no-speed --out "$OUT/receipts" >"$OUT/gates.log" 2>&1
lap "gates rc=$?"
tail -10 "$OUT/gates.log"
