#!/usr/bin/env bash
# Issue 28's "done when" on this checkout against a base commit, in one device call or two:
#   OUT=... bench/cupy_issue_round.sh BASE_REF [HEAD_REF]        (HEAD_REF default main)
# 1. gpu.yaml BASE..HEAD without the speed look (flags unset == main: the base's bits), beside
#    the cupy suite of this checkout (pytest -k "cupy or gemm or ..."), within GATES_S seconds
#    (default 300; the gates ROUND_JOBS at a time, default 8); the receipt's files in
#    $OUT/receipts.tgz;
# 2. bench/cupy_bars.sh (ours, engine bench, MTP, the bars' table, then transformers) in what
#    is left of ROUND_BUDGET seconds (default 575).
# ROUND_PARTS (default "gates bars") picks the steps. On a fresh machine both do not fit one
# 600 s call (2026-12-07, ninth session, H100: gpu.yaml ran 230 of 309 arms in 280 s beside
# the suite; transformers' two compiled arms need about 200 s), so run ROUND_PARTS=gates
# GATES_S=540 first, then ROUND_PARTS=bars on the same warm machine: the bars stay one run.
# The gates' trees come from .carry/repo.bundle (`git bundle create .carry/repo.bundle HEAD
# main` before the call: a device machine's copy of .git may be stale), which must hold
# HEAD_REF at this working tree's commit; wheels in .whl (gitpython for the gates) are
# installed first. Logs in $OUT.
set -u
BASE=$1
HEADREF=${2:-main}
OUT=${OUT:-/tmp/issue-round}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)  # absolute: the gates run from their clone
[ -f .carry/repo.bundle ] || { echo "no .carry/repo.bundle: the gates would test a stale tree" >&2; exit 2; }
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONUNBUFFERED=1 ENGINE_SYNTHETIC_DIR=${ENGINE_SYNTHETIC_DIR:-/tmp/syn}
t0=$(date +%s)
lap() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rm -rf /tmp/repo && git clone -q .carry/repo.bundle /tmp/repo
(cd /tmp/repo && git branch -q "$HEADREF" "origin/$HEADREF" 2>/dev/null; git log --oneline -1 "$HEADREF")
# the suite runs this working tree, the gates HEAD_REF: say so where their files differ
git -C /tmp/repo checkout -q "$HEADREF"
for d in engine tests; do
    diff -rq --exclude=__pycache__ "/tmp/repo/$d" "$d" >/dev/null \
        || echo "warning: $d/ of $HEADREF in the bundle is not this working tree's"
done
python3 -c "from engine.model import synthetic; synthetic.resolve('synthetic:qwen3-0.6b')"
parts=${ROUND_PARTS:-gates bars}
if [[ " $parts " == *" gates "* ]]; then
    gates_s=${GATES_S:-300}
    (cd /tmp/repo && timeout "$gates_s" python3 -m gates run --matrix matrices/gpu.yaml \
        --base "$BASE" --head "$HEADREF" --jobs "${ROUND_JOBS:-8}" --no-lean --no-speed \
        > "$OUT/gates.log" 2>&1
        echo "gates rc=$?" >> "$OUT/gates.log") &
    g=$!
    suite_k="cupy or gemm or launch or graph or fusions or tile or epilogue or wide"
    timeout "$((gates_s - 20))" python3 -m pytest -q -p no:cacheprovider tests/engine \
        tests/conformance -k "$suite_k" > "$OUT/suite.log" 2>&1
    lap "suite rc=$?: $(tail -1 "$OUT/suite.log")"
    grep -m8 -E "^(FAILED|ERROR)" "$OUT/suite.log"
    wait $g
    lap "$(tail -2 "$OUT/gates.log")"
    grep -hE "^\| (✅|❌|⚠️)" /tmp/repo/receipts/*.gpu.md | head -9
    (cd /tmp/repo/receipts && tar czf "$OUT/receipts.tgz" .) 2>/dev/null
fi
[[ " $parts " == *" bars "* ]] || exit 0
left=$((${ROUND_BUDGET:-575} - ($(date +%s) - t0)))
lap "bars with $left s"
if [ "$left" -lt 120 ]; then
    echo "too little time left for the bars"
    exit 0
fi
# cupy_bars.sh's own steps take their time first; transformers get what is left of the budget
OUT="$OUT/bars" BARS_BUDGET=$((left - 5)) timeout -k 5 "$left" bash bench/cupy_bars.sh > "$OUT/bars-run.log" 2>&1
lap "bars rc=$?"
grep -v "^\[" "$OUT/bars-run.log" | tail -12
# a device call brings back a few files: the bars' logs as one
tar czf "$OUT/bars.tgz" -C "$OUT" bars && rm -rf "$OUT/bars"
