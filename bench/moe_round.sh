#!/usr/bin/env bash
# One device call for MoE on the cupy backend (docs/moe.md, "On cupy"), everything at once:
#   bench/moe_round.sh OUT_DIR [LAYERS]
# 1. the MoE and cupy tests (tests/conformance/test_moe.py, tests/engine/test_moe_block.py,
#    tests/engine/test_cupy_backend.py; -k cupy);
# 2. two bugs planted in a copy of the tree, each run against test_moe_block.py -k cupy:
#    routing ties to the higher id, and a row's expert outputs summed in reverse rank order;
# 3. bench/cupy_speed.py on synthetic:qwen3-30b-a3b,layers=LAYERS (default 2): ours eager and
#    graph, then transformers eager and static (generate() compiled), each in its own process
#    under a timeout so that a slow compile cannot eat the call.
set -u
OUT=$1
L=${2:-2}
M="synthetic:qwen3-30b-a3b,layers=$L"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
mkdir -p "$OUT"
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }

timeout ${T_TESTS:-200} python3 -m pytest -q -p no:cacheprovider -p no:randomly --tb=short \
    tests/conformance/test_moe.py tests/engine/test_moe_block.py tests/engine/test_cupy_backend.py \
    -k cupy >"$OUT/tests.log" 2>&1
lap "tests rc=$?: $(tail -1 "$OUT/tests.log")"

plant() {  # name, file, sed expression
    rm -rf "/tmp/plant-$1"
    cp -a . "/tmp/plant-$1"
    sed -i "$3" "/tmp/plant-$1/$2"
    if cmp -s "$2" "/tmp/plant-$1/$2"; then lap "plant $1: sed changed nothing"; return; fi
    (cd "/tmp/plant-$1" && timeout 60 python3 -m pytest -q -p no:cacheprovider -p no:randomly \
        tests/engine/test_moe_block.py -k cupy) >"$OUT/plant-$1.log" 2>&1
    lap "plant $1 rc=$?: $(tail -1 "$OUT/plant-$1.log")"
}
plant ties-high engine/ops/cupy_moe.cu 's/p > bp/p >= bp/'
plant sum-reversed engine/ops/cupy_moe.cu 's/const long long p = row \* k + r;/const long long p = row * k + (k - 1 - r);/'

timeout ${T_OURS:-150} python3 bench/cupy_speed.py --model "$M" --streams 1 8 --steps 16 \
    --json "$OUT/speed-ours.json" >"$OUT/speed-ours.log" 2>&1
lap "cupy_speed ours rc=$?"
for mode in eager static; do
    timeout ${T_HF:-100} python3 bench/cupy_speed.py --model "$M" --streams 1 8 --steps 16 \
        --skip-ours --transformers $mode --json "$OUT/speed-hf-$mode.json" \
        >"$OUT/speed-hf-$mode.log" 2>&1
    lap "cupy_speed transformers $mode rc=$?"
done
grep -h '^{' "$OUT"/speed-*.log
