#!/usr/bin/env bash
# The GPU speed look's calibration (docs/gates.md, "The GPU speed look"), in one device call:
#   bench/cupy_calibrate.sh OUT_DIR [NOOP_TRIES] [P02_TRIES] [P05_TRIES]
# gpu.yaml's speed section, this tree against itself (--dirs: no git), no-op and with a planted
# slowdown on head (ENGINE_CALIBRATE_SLOWDOWN: each engine action busy-waits for that fraction
# of its CPU time, which on a GPU host is its wall time: the host spins while it waits).
set -u
OUT=$1
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 GATES_CACHE=${GATES_CACHE:-/tmp/calib-cache}
run() {  # name plant tries
    [ "$3" -gt 0 ] || return 0
    local extra=()
    [ "$2" != 0 ] && extra=(--plant "$2")
    python3 -m gates.speed_calibrate --dirs "$PWD" "$PWD" --matrix matrices/gpu.yaml \
        --tries "$3" "${extra[@]}" --out "$OUT/$1.jsonl" 2>&1 | tee "$OUT/$1.log" | grep -E "^try|tries"
}
run noop 0 "${2:-10}"
run p02 0.02 "${3:-10}"
run p05 0.05 "${4:-5}"
python3 -m gates.speed_calibrate --summary "$OUT"/*.jsonl
