#!/usr/bin/env bash
# Issue 28's bars on this machine in one call (bench/cupy_bars.py prints the table):
#   OUT=... bench/cupy_bars.sh        (BARS_BUDGET seconds, default 400; BARS_TRANSFORMERS="")
# 1. bench/cupy_speed.py --streams 1 8: ours (graph replay, prefill);
# 2. python -m engine bench --parallel 1,8 on synthetic:qwen3-0.6b (the batching ratio);
# 3. bench/drafter_ratio.py, MTP against plain on the trained tiny fixture, 1 and 8 streams;
# 4. the table; then, in what is left of the budget, transformers eager and compiled (static
#    cache) on the same weights (peers.json): last, since their compile can take minutes.
set -u
OUT=${OUT:-/tmp/bars}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
left() { echo $((${BARS_BUDGET:-400} - ($(date +%s) - t0))); }
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$DEVICE"
# a device machine's copy of .git may be stale: the bundle's HEAD names the tree sent with it
if [ -f .carry/repo.bundle ]; then
    echo "tree: $(git bundle list-heads .carry/repo.bundle HEAD | cut -c1-12) (.carry/repo.bundle HEAD)"
else
    git log --oneline -1 2>/dev/null
fi
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
timeout 150 python3 bench/cupy_speed.py --streams 1 8 --json "$OUT/speed.json" > "$OUT/speed.log" 2>&1
lap "speed rc=$?"
timeout 120 python3 -m engine bench --backend cupy --model synthetic:qwen3-0.6b --parallel 1,8 \
    --prompt-tokens 16 --gen-tokens 64 --repeats 3 --json > "$OUT/bench.json" 2> "$OUT/bench.log"
lap "engine bench rc=$?"
timeout 200 python3 bench/drafter_ratio.py --backend cupy --model fixtures/models/tiny-qwen3 \
    --drafter mtp --parallel 1 8 --pairs 21 --draft-tokens 4 > "$OUT/mtp.jsonl" 2> "$OUT/mtp.log"
lap "mtp rc=$?"
python3 bench/cupy_bars.py --speed "$OUT/speed.json" --bench "$OUT/bench.json" \
    --mtp "$OUT/mtp.jsonl" --device "$DEVICE" | tee "$OUT/bars.md"
modes=${BARS_TRANSFORMERS-eager static}
if [ -n "$modes" ] && [ "$(left)" -gt 30 ]; then
    timeout "$(left)" python3 bench/cupy_speed.py --streams 1 8 --skip-ours --transformers $modes \
        --json "$OUT/peers.json" > "$OUT/peers.log" 2>&1
    lap "transformers rc=$?"; grep -h '^{' "$OUT/peers.log" | cut -c1-160
fi
