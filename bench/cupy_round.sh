#!/usr/bin/env bash
# One device call for the cupy backend, head against a base tree, everything in one run:
#   bench/cupy_round.sh BASE_DIR OUT_DIR [--transformers]
# 1. the cupy tests of the head (tests/engine/test_cupy_backend.py, tests/conformance -k cupy),
#    beside step 2 (neither depends on timing);
# 2. replies of base and head through `python -m engine run` (bench/exact_cli.py, serial and
#    --parallel 8, bf16 and fp8, synthetic:qwen3-0.6b): head == serial, and head == base
#    (ids, margins, logit hashes, finish reasons);
# 3. bench/cupy_speed.py, base then head (and compiled transformers with --transformers);
# 4. `python -m engine bench --backend cupy --parallel 1,8`, base then head, on the tiny
#    fixture and on synthetic:qwen3-0.6b (BENCH_MODELS, BENCH_PROMPTS, BENCH_SIDES below).
# 5. with ROUND_PARTS=1, bench/cupy_rounds.py on the head: a bench run's actions and parts;
#    with ROUND_HOST=1, bench/cupy_host.py on both sides: a step's host time by function.
# HEAD_ENV (e.g. ENGINE_CUPY_TILE_CALLS=1) is set for every head-side command.
# Logs and JSON go to OUT_DIR; a short table is printed last.
set -u
BASE=$1
OUT=$2
HF=${3:-}
HEAD=$(pwd)
HEAD_ENV=${HEAD_ENV:-ENGINE_ROUND_SIDE=head}
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
M=synthetic:qwen3-0.6b
mkdir -p "$OUT"
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }

python3 -c "from engine.model import synthetic; synthetic.resolve('$M')"  # made once, before any reader
lap "synthetic weights ready"

# the tests and both sides' replies do not depend on timing: they run side by side
env $HEAD_ENV python3 -m pytest -q -p no:cacheprovider tests/engine/test_cupy_backend.py \
    tests/engine/test_cupy_options.py tests/engine/test_cupy_greedy.py tests/engine/test_cupy_gemm.py tests/conformance -k cupy >"$OUT/tests.log" 2>&1 &
tests=$!
pids=()
for side in base head; do
    dir=$BASE; senv=ENGINE_ROUND_SIDE=base
    [ $side = head ] && dir=$HEAD && senv=$HEAD_ENV
    (cd "$dir" && env $senv python3 bench/exact_cli.py --model $M --backend cupy --out /tmp/exact-$side \
        --arms parallel8) >"$OUT/exact-$side.log" 2>&1 &
    pids+=($!)
done
for side in 0 1; do
    wait "${pids[$side]}"
    rc=$?
    name=$([ $side = 0 ] && echo base || echo head)
    lap "exact $name rc=$rc: $(grep -c 'serial: yes' "$OUT/exact-$name.log") arms == serial"
done
wait $tests
lap "tests rc=$?: $(tail -1 "$OUT/tests.log")"
python3 - <<'EOF' >"$OUT/exact-cross.log" 2>&1
import json, pathlib
keys = ("ids", "margins", "logit_hashes", "finish_reason")
bad = n = 0
for f in sorted(pathlib.Path("/tmp/exact-head").glob("*.jsonl")):
    if f.name == "requests.jsonl":
        continue
    a = [json.loads(x) for x in f.read_text().splitlines()]
    b = [json.loads(x) for x in (pathlib.Path("/tmp/exact-base") / f.name).read_text().splitlines()]
    for ra, rb in zip(sorted(a, key=lambda r: r["id"]), sorted(b, key=lambda r: r["id"])):
        n += 1
        bad += any(ra[k] != rb[k] for k in keys)
print(f"head == base: {n - bad} of {n} replies")
EOF
lap "$(cat "$OUT/exact-cross.log")"

# SPEED_SIDES="head base head": another order (each side's later runs: speed-<side>-<i>.json)
declare -A seen=()
for side in ${SPEED_SIDES:-base head}; do
    [ -n "${ROUND_SKIP_SPEED:-}" ] && break  # ROUND_SKIP_SPEED=1: no cupy_speed.py
    dir=$BASE; senv=ENGINE_ROUND_SIDE=base
    extra=()
    [ $side = head ] && dir=$HEAD && senv=$HEAD_ENV && [ -n "$HF" ] && extra=(--transformers static)
    seen[$side]=$((${seen[$side]:-0} + 1))
    tag=$side$([ "${seen[$side]}" -gt 1 ] && echo "-${seen[$side]}")
    (cd "$dir" && env $senv python3 bench/cupy_speed.py --model $M --streams 1 8 --steps 32 "${extra[@]}" \
        --json "$OUT/speed-$tag.json") >"$OUT/speed-$tag.log" 2>&1
    lap "cupy_speed $tag rc=$?"
done

# BENCH_MODELS, BENCH_PROMPTS (prompt tokens), BENCH_SIDES (head-nohash: the head with
# ENGINE_LOGIT_HASHES=0) pick the benches
for model in ${BENCH_MODELS:-fixtures/models/tiny-qwen3 $M}; do
    for prompt in ${BENCH_PROMPTS:-128}; do
        for side in ${BENCH_SIDES:-base head}; do
            dir=$BASE; senv=ENGINE_ROUND_SIDE=base
            [ $side != base ] && dir=$HEAD && senv=$HEAD_ENV
            [ $side = head-nohash ] && senv="$HEAD_ENV ENGINE_LOGIT_HASHES=0"
            tag=$(basename "$model" | tr ':' '-')-p$prompt
            (cd "$dir" && env $senv python3 -m engine bench --backend cupy --model "$model" \
                --parallel 1,8 --prompt-tokens "$prompt" --json) \
                >"$OUT/bench-$tag-$side.json" 2>"$OUT/bench-$tag-$side.log"
            lap "bench $tag $side rc=$?"
        done
    done
done

if [ -n "${ROUND_HOST:-}" ]; then  # ROUND_HOST=1: host time of a step by function, both sides
    cp bench/cupy_host.py "$BASE/bench/cupy_host.py" 2>/dev/null
    for side in base head; do
        dir=$BASE; [ $side = head ] && dir=$HEAD
        (cd "$dir" && python3 bench/cupy_host.py --model $M --streams 8) >"$OUT/host-$side.log" 2>&1
        lap "cupy_host $side rc=$?: $(grep '===' "$OUT/host-$side.log" | tr '\n' ' ')"
    done
fi

if [ -n "${ROUND_PARTS:-}" ]; then  # ROUND_PARTS=1: where the head's bench rounds go
    for extra in "" "--prompt-tokens 64"; do
        tag=rounds$(echo "$extra" | tr -dc 0-9)
        env $HEAD_ENV python3 bench/cupy_rounds.py --model $M --parallel 1 8 $extra \
            --json "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1
        lap "cupy_rounds $extra rc=$?"
    done
fi

python3 - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("cupy_speed (synthetic:qwen3-0.6b, context 512): step ms / replay ms")
for f in sorted(out.glob("speed-*.json")):
    side = f.stem[len("speed-"):]
    if f.exists():
        for r in json.loads(f.read_text()):
            print(f"  {side} {r['engine']:<26} {r['streams']} streams  step {r['step_ms']:.3f}"
                  f"  replay {r.get('replay_ms', float('nan')):.3f}  prefill {r.get('prefill_tok_s', 0):.0f}")
print("engine bench --parallel 1,8: decode tok/s")
for f in sorted(out.glob("bench-*.json")):
    try:
        sweep = json.loads(f.read_text())["sweep"]
    except Exception as exc:
        print(f"  {f.name}: {exc}")
        continue
    print(f"  {f.stem:<34}" + "  ".join(
        f"{r['parallel']}: {r['decode_tok_s']:8.1f} ({r['decode_cpu_s_per_token'] * 1e3:.2f} ms cpu/tok)"
        for r in sweep) + (f"  ratio {sweep[-1]['decode_tok_s'] / sweep[0]['decode_tok_s']:.2f}x"
                           if len(sweep) > 1 and sweep[0]['decode_tok_s'] else ""))
EOF
