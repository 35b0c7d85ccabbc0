#!/usr/bin/env bash
# Drafter gains on the GPU, base tree against head, in one device call:
#   bench/cupy_drafters.sh BASE_DIR OUT_DIR
# For each fixture with an MTP head and each side: `python -m engine bench --backend cupy
# --parallel 1,8` plain and with --drafter mtp (DRAFTERS to change), best of REPEATS runs,
# prompts of PROMPT tokens. Prints decode tok/s, the drafted run's gain over the plain one,
# and its acceptance. JSON per bench in OUT_DIR.
set -u
BASE=$1
OUT=$2
HEAD=$(pwd)
mkdir -p "$OUT"
for model in ${MODELS:-fixtures/models/tiny-qwen3 fixtures/models/tiny-qwen3-moe}; do
    for side in ${SIDES:-base head}; do
        dir=$BASE; [ "$side" = head ] && dir=$HEAD
        for drafter in none ${DRAFTERS:-mtp}; do
            tag=$(basename "$model")-$side-$drafter
            (cd "$dir" && python3 -m engine bench --backend cupy --model "$HEAD/$model" \
                --parallel 1,8 --prompt-tokens "${PROMPT:-16}" --gen-tokens "${GEN:-64}" \
                --repeats "${REPEATS:-3}" --drafter "$drafter" --json) \
                >"$OUT/$tag.json" 2>"$OUT/$tag.log" || echo "$tag failed: $(tail -1 "$OUT/$tag.log")"
        done
    done
done
python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("*.json")):
    try:
        rows[f.stem] = {r["parallel"]: r for r in json.loads(f.read_text())["sweep"]}
    except Exception as exc:
        print(f"{f.stem}: {exc}")
print("decode tok/s (drafted / plain = gain, acceptance)")
for tag, sweep in rows.items():
    if tag.endswith("-none"):
        continue
    plain = rows.get(tag.rsplit("-", 1)[0] + "-none", {})
    cells = []
    for n, r in sweep.items():
        p = plain.get(n, {}).get("decode_tok_s", 0.0)
        gain = r["decode_tok_s"] / p if p else float("nan")
        cells.append(f"{n}: {r['decode_tok_s']:8.1f} / {p:8.1f} = {gain:.2f}x (acc {r['acceptance']:.2f})")
    print(f"  {tag:<32}" + "   ".join(cells))
PY
