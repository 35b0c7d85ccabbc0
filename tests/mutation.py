"""Mutation testing of the modules that decide things, each against its own fast tests.

    python -m tests.mutation [MODULE ...] [--changed-since REF] [--jobs N]

Per module, a scratch copy of the repository under .mutation/<name>/ gets a [tool.mutmut]
section that mutates only that module and runs only its tests (MODULES); `mutmut run` there,
then one line per module: killed / survived / other, the score, and the surviving mutants'
names (`cd .mutation/<name> && python -m mutmut show NAME` prints one's diff). Mutants
listed in EQUIVALENT are counted apart (docs/testing.md says why each one is). Exit 1 if
a module scores under --min (default 80 %). nox -s mutation runs it; docs/testing.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".mutation"
COPY = ("engine", "gates", "tests", "fixtures", "matrices", "conftest.py", "pyproject.toml")

# module -> the tests that are its own (fast, host only): files, or pytest node ids where a
# file also holds end-to-end tests that would run for every mutant (tens of seconds each)
UNITS = "tests/gates/test_gates_units.py::"
SPEED = "tests/gates/test_speed.py::"
VALIDATE = "tests/gates/test_gates_validate.py::"
STORE = "tests/gates/test_store_"
MODULES: dict[str, list[str]] = {
    "engine/lanes/policy.py": ["tests/engine/test_scheduler.py", "tests/engine/test_policy.py"],
    "engine/lanes/sampling.py": [
        "tests/engine/test_logit_hash.py",
        "tests/engine/test_sampling.py",
    ],
    "engine/kv/plan.py": ["tests/engine/test_kv_codec.py", "tests/engine/test_kv_plan.py"],
    "engine/kv/codec.py": ["tests/engine/test_kv_codec.py"],
    "engine/serve/openai.py": ["tests/engine/test_openai_request.py"],
    "engine/serve/schema.py": ["tests/engine/test_openai_request.py"],  # what to_request checks
    "engine/config.py": ["tests/engine/test_config.py"],
    "gates/judge/checks/equality.py": [
        *(UNITS + t for t in ("test_first_difference", "test_compare_counts_and_divergence")),
        *(UNITS + t for t in ("test_compare_error_on_one_side_and_missing_reply",)),
        UNITS + "test_decoder_from_tokenizer_json",
        "tests/gates/test_equality_mutants.py",
    ],
    "gates/run/store.py": [STORE + "keys.py", STORE + "mutants.py"],
    "gates/plan/hashes.py": [STORE + "keys.py", STORE + "mutants.py"],
    "gates/plan/matrix.py": [  # test_gates_validate's receipt-size run (11 s) is left out
        "tests/gates/test_gates_matrix.py",
        "tests/gates/test_matrix_edges.py",
        *(
            VALIDATE + t
            for t in (
                "test_values_no_engine_knows_are_bad_input",
                "test_a_value_one_engine_knows_is_fine",
                "test_an_axis_value_refused_on_both_commits_is_named",
                "test_a_matrix_typo_is_exit_2_naming_file_and_key",
            )
        ),
    ],
    "gates/run/speed/stats.py": [  # test_speed's end-to-end runs (20-50 s each) are left out
        *(SPEED + t for t in ("test_clear_cpu_shift_is_slower", "test_faster_and_equivalent")),
        *(SPEED + t for t in ("test_pairing_cancels_the_machines_drift", "test_holm_and_looks")),
        *(SPEED + t for t in ("test_noisy_is_inconclusive", "test_few_blocks_give_no_interval")),
        *(SPEED + t for t in ("test_small_shift_needs_min_effect", "test_outliers_flag_unstable")),
        SPEED + "test_a_loss_past_the_tolerance_is_slower_small_never_equivalent",
        SPEED + "test_equivalent_only_inside_the_tolerance",
        "tests/gates/test_stats_values.py",
    ],
    "gates/run/speed/estimate.py": [SPEED.rstrip(":"), "tests/gates/test_speed_estimate.py"],
}

# where only part of a module decides things: the mutant names (globs) that are run and counted
SCOPE: dict[str, list[str]] = {
    "engine/serve/openai.py": [  # request parsing; the response shapes are the server's tests'
        "engine.serve.openai.x_to_request__mutmut_*",
    ],
}

# mutants that change no behaviour: name -> why (docs/testing.md lists them too)
ESTIMATE, STATS = "gates.run.speed.estimate.", "gates.run.speed.stats."
EQUIVALENT: dict[str, str] = {
    "engine.config.xǁEngineConfigǁvalidate__mutmut_8": 'float("INF") is float("inf")',
    "engine.kv.codec.x_encode__mutmut_23": "frexp of a finite float32 <= 128: exp - 8 < 127",
    "engine.kv.codec.x_encode__mutmut_31": "frexp of a finite float32 <= 128: exp - 8 < 127",
    "engine.kv.codec.x_decode__mutmut_10": "code * 2**exp rounds once, in float64 or float32",
    "engine.kv.plan.xǁPagePlanǁ_cached_prefix__mutmut_3": "paging off: the cache is empty",
    ESTIMATE + "x__costs__mutmut_6": "TimedRun.parse refuses action lists of unequal length",
    ESTIMATE + "x__costs__mutmut_10": "TimedRun.parse refuses action lists of unequal length",
    ESTIMATE + "x__costs__mutmut_19": "TimedRun.parse refuses action lists of unequal length",
    ESTIMATE + "x_value__mutmut_15": 'float("NAN") is float("nan")',
    ESTIMATE + "x_value__mutmut_41": 'float("NAN") is float("nan")',
    "engine.kv.plan.xǁPagePlanǁopen__mutmut_26": "a fresh page has refs 0: = 1 is += 1",
    "engine.kv.plan.xǁPagePlanǁopen__mutmut_31": "a lane's own pages have refs 0: = 1 is += 1",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_5": "paging off: keys are never read",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_14": "a page held twice is cached: none moves it",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_22": "page_key's values are never read",
    "engine.kv.plan.xǁPagePlanǁprefix_keys__mutmut_2": "paging off: no page is cached to match",
    "engine.lanes.sampling.x__mix__mutmut_1": "its one caller ignores overflow around it",
    "engine.lanes.sampling.x_uniforms__mutmut_22": "astype(None) is astype(float64)",
    "engine.lanes.sampling.x_sample__mutmut_22": "astype(None) is astype(float64)",
    "engine.lanes.sampling.x_margin__mutmut_5": "numpy reads reshape(-2) as reshape(-1)",
    **{
        f"gates.plan.matrix.xǁMatrixǁpoints__mutmut_{i}": "a point has one value per axis"
        for i in (7, 10, 11)
    },
    **{
        f"gates.plan.matrix.x__speed__mutmut_{i}": "SpeedSpec.from_json reads only its fields"
        for i in (130, 133, 134, 135, 138, 139)
    },
    "gates.plan.matrix.x__speed__mutmut_203": "max_blocks == blocks: set to itself",
    **{
        f"gates.plan.matrix.x_load__mutmut_{i}": "str of a missing description is '' either way"
        for i in (59, 61, 121)
    },
    **{
        f"engine.lanes.sampling.x_logit_hashes__mutmut_{i}": """+'"'+same+'"'+"""
        for i in (14, 15, 17, 18)
    },
    **{
        f"engine.lanes.sampling.x__pool__mutmut_{i}": "the pool's size, not the hashes"
        for i in (6, 11, 12, 13)
    },
    "engine.lanes.sampling.x_logit_hash__mutmut_18": "row_hash_words makes it float32",
    "engine.lanes.sampling.x_logit_hash__mutmut_20": "row_hash_words makes it float32",
    "engine.lanes.sampling.x_row_hash_words__mutmut_19": "uint64 arrays wrap without a warning",
    "engine.lanes.sampling.x_row_hash_words__mutmut_38": "a uint64 sum is uint64 by default",
    "engine.lanes.sampling.x_row_hash_words__mutmut_40": "a uint64 sum is uint64 by default",
    "engine.serve.openai.x_to_request__mutmut_98": "bool(get('stream', None)) is False too",
    "engine.serve.openai.x_to_request__mutmut_100": "bool(get('stream')) is False too",
    STATS + "x__unstable__mutmut_4": "no float MAD m makes 1.4826 * m exactly 0.05",
    STATS + "x_cell__mutmut_10": "the trimmed mean of no blocks is nan too",
    STATS + "x_holm__mutmut_11": "every entry of out is written over",
    STATS + "x_interval__mutmut_6": "every d is d[0] in that branch",
    STATS + "x_interval__mutmut_8": "every d is d[0] in that branch",
    STATS + "x_interval__mutmut_12": "vectorized=None: scipy sees _center's axis",
    STATS + "x_interval__mutmut_19": "vectorized left out: scipy sees _center's axis",
    STATS + "x_interval__mutmut_21": "confidence_level left out: 0.95 is the default",
    STATS + "x_interval__mutmut_25": "vectorized=False: the same means, one call each",
    STATS + "x_interval__mutmut_27": "scipy lower-cases method=",
    STATS + "x_signed_rank__mutmut_8": "two-sided is wilcoxon's default",
    STATS + "x_signed_rank__mutmut_10": "scipy lower-cases alternative=",
    STATS + "x_verdicts__mutmut_18": "holm gives one p per cell: strict never fires",
    STATS + "x_verdicts__mutmut_21": "holm gives one p per cell: strict never fires",
    STATS + "x_verdicts__mutmut_23": "holm gives one p per cell: strict never fires",
    "gates.judge.checks.equality.x__bits_diff__mutmut_70": "[None] * (i + 2) has None at i too",
    "gates.judge.checks.equality.x__bits_diff__mutmut_80": "[None] * (i + 2) has None at i too",
    "gates.judge.checks.equality.x_compare__mutmut_122": "client.difference is pure; unread then",
    "gates.judge.checks.equality.x_first_difference__mutmut_4": "zip's strict=None is False",
    "gates.judge.checks.equality.x_first_difference__mutmut_7": "zip's strict defaults to False",
    "gates.plan.hashes.x_hash_file__mutmut_13": "read(None): one chunk, the same sha256",
    "gates.plan.hashes.x_hash_file__mutmut_15": "2 MiB chunks: the same sha256",
    "gates.plan.hashes.x_hash_file__mutmut_16": "2 MiB chunks: the same sha256",
    "gates.run.store.x_write_atomic__mutmut_17": "umask(1) is undone before any file is made",
    "gates.run.store.x_write_atomic__mutmut_30": "on a failed write the temporary exists: only "
    "os.replace, the last step, takes it away",
    "gates.run.store.x_write_atomic__mutmut_32": "on a failed write the temporary exists: only "
    "os.replace, the last step, takes it away",
    "gates.run.store.xǁStoreǁread__mutmut_6": '"" is not a dict either: the same miss',
    "gates.run.store.xǁStoreǁwrite__mutmut_12": "the temporary's suffix is read by nothing",
    "gates.run.store.xǁStoreǁwrite__mutmut_15": "the temporary's suffix is read by nothing",
    "gates.run.store.xǁStoreǁwrite__mutmut_18": "the temporary's suffix is read by nothing",
    "gates.run.store.xǁStoreǁwrite__mutmut_19": "the temporary's suffix is read by nothing",
}

KILLED = {1, 3}
SURVIVED = {0}


def scratch_for(module: str) -> Path:
    return SCRATCH / module.removesuffix(".py").replace("/", ".")


def prepare(module: str, tests: list[str]) -> Path:
    """A copy of the repository whose pyproject mutates `module` and runs `tests`."""
    where = scratch_for(module)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, where / name, ignore=skip)
        elif src.exists():
            shutil.copy2(src, where / name)
    section = {
        "source_paths": ["engine", "gates"],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist"],
        "also_copy": ["conftest.py", "fixtures", "matrices"],  # tests read them from the root
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in section.items()]
    with open(where / "pyproject.toml", "a") as f:
        f.write("\n".join(lines) + "\n")
    return where


def tally(where: Path, module: str) -> dict[str, list[str]]:
    meta = json.loads((where / "mutants" / f"{module}.meta").read_text())
    out: dict[str, list[str]] = {"killed": [], "survived": [], "equivalent": [], "other": []}
    scope = SCOPE.get(module)
    for name, code in sorted(meta["exit_code_by_key"].items()):
        if scope and not any(fnmatch.fnmatchcase(name, g) for g in scope):
            continue
        if code in KILLED:  # a listed name that is killed was renumbered: it counts as killed
            out["killed"].append(name)
        elif code in SURVIVED:
            out["equivalent" if name in EQUIVALENT else "survived"].append(name)
        else:
            out["other"].append(f"{name} (exit {code})")
    return out


def run_one(module: str, jobs: int) -> dict[str, list[str]]:
    tests = [t for t in MODULES[module] if (ROOT / t.split("::")[0]).exists()]
    if not tests:  # mutmut would run the whole suite per mutant
        raise SystemExit(f"mutation: error: {module}: none of its tests exist")
    where = prepare(module, tests)
    cmd = [
        sys.executable,
        "-m",
        "mutmut",
        "run",
        "--max-children",
        str(jobs),
        *SCOPE.get(module, []),
    ]
    subprocess.run(cmd, cwd=where, check=False, stdout=subprocess.DEVNULL)
    return tally(where, module)


def score(t: dict[str, list[str]]) -> float:
    judged = len(t["killed"]) + len(t["survived"]) + len(t["other"])
    return 100.0 * len(t["killed"]) / judged if judged else 100.0


def changed(ref: str) -> list[str]:
    names = subprocess.run(
        ["git", "diff", "--name-only", f"{ref}...HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    return [m for m in MODULES if m in names or any(t.split("::")[0] in names for t in MODULES[m])]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.mutation")
    p.add_argument("modules", nargs="*", help=f"default: all of {len(MODULES)}")
    p.add_argument("--changed-since", metavar="REF", help="only modules (or their tests) changed")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--min", type=float, default=80.0)
    a = p.parse_args(argv)
    unknown = [m for m in a.modules if m not in MODULES]
    if unknown:
        print(f"mutation: error: not a mutated module: {', '.join(unknown)}", file=sys.stderr)
        return 2
    modules = a.modules or (changed(a.changed_since) if a.changed_since else list(MODULES))
    low = []
    for module in modules:
        t = run_one(module, a.jobs)
        s = score(t)
        print(
            f"{module}: {s:.0f} % killed {len(t['killed'])} survived {len(t['survived'])} "
            f"equivalent {len(t['equivalent'])} other {len(t['other'])}",
            flush=True,
        )
        for name in t["survived"] + t["other"]:
            print(f"    {name}", flush=True)
        if s < a.min:
            low.append(module)
    if low:
        print(f"mutation: under {a.min:.0f} %: {', '.join(low)}", file=sys.stderr)
    return 1 if low else 0


if __name__ == "__main__":
    sys.exit(main())
