#!/usr/bin/env bash
# Issue 28's bars on this machine in one call (bench/cupy_bars.py prints the table):
#   OUT=... bench/cupy_bars.sh            (BARS_TRANSFORMERS="" leaves transformers out)
# 1. bench/cupy_speed.py --streams 1 8 beside transformers eager and compiled (static cache);
# 2. python -m engine bench --parallel 1,8 on synthetic:qwen3-0.6b (the batching ratio);
# 3. bench/drafter_ratio.py, MTP against plain on the trained tiny fixture, 1 and 8 streams.
set -u
OUT=${OUT:-/tmp/bars}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
DEVICE=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$DEVICE"; git log --oneline -1 2>/dev/null
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
timeout 300 python3 bench/cupy_speed.py --streams 1 8 --transformers ${BARS_TRANSFORMERS-eager static} \
    --json "$OUT/speed.json" > "$OUT/speed.log" 2>&1
lap "speed rc=$?"
if [ ! -s "$OUT/speed.json" ]; then  # transformers missing or failing: ours alone
    tail -3 "$OUT/speed.log"
    timeout 120 python3 bench/cupy_speed.py --streams 1 8 --json "$OUT/speed.json" > "$OUT/speed-ours.log" 2>&1
    lap "speed without transformers rc=$?"
fi
timeout 120 python3 -m engine bench --backend cupy --model synthetic:qwen3-0.6b --parallel 1,8 \
    --prompt-tokens 16 --gen-tokens 64 --repeats 3 --json > "$OUT/bench.json" 2> "$OUT/bench.log"
lap "engine bench rc=$?"
timeout 200 python3 bench/drafter_ratio.py --backend cupy --model fixtures/models/tiny-qwen3 \
    --drafter mtp --parallel 1 8 --pairs 21 --draft-tokens 4 > "$OUT/mtp.jsonl" 2> "$OUT/mtp.log"
lap "mtp rc=$?"
python3 bench/cupy_bars.py --speed "$OUT/speed.json" --bench "$OUT/bench.json" \
    --mtp "$OUT/mtp.jsonl" --device "$DEVICE" | tee "$OUT/bars.md"
