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

# module -> the tests that are its own (fast, host only)
MODULES: dict[str, list[str]] = {
    "engine/lanes/policy.py": ["tests/engine/test_scheduler.py", "tests/engine/test_policy.py"],
    "engine/lanes/sampling.py": [
        "tests/engine/test_logit_hash.py",
        "tests/engine/test_sampling.py",
    ],
    "engine/kv/plan.py": ["tests/engine/test_kv_codec.py", "tests/engine/test_kv_plan.py"],
    "engine/kv/codec.py": ["tests/engine/test_kv_codec.py"],
    "engine/serve/openai.py": ["tests/engine/test_openai_request.py"],
    "engine/config.py": ["tests/engine/test_config.py"],
    "gates/checks/equality.py": ["tests/gates/test_gates_units.py", "tests/gates/test_checks.py"],
    "gates/store.py": ["tests/gates/test_store_keys.py"],  # arm_key, fingerprint
    "gates/matrix.py": ["tests/gates/test_gates_matrix.py", "tests/gates/test_gates_validate.py"],
    "gates/speed/stats.py": ["tests/gates/test_speed.py"],
    "gates/speed/estimate.py": ["tests/gates/test_speed.py", "tests/gates/test_speed_estimate.py"],
}

# where only part of a module decides things: the mutant names (globs) that are run and counted
SCOPE: dict[str, list[str]] = {
    "engine/serve/openai.py": [  # request parsing; the response shapes are the server's tests'
        "engine.serve.openai.x_to_request__mutmut_*",
        "engine.serve.openai.x__refuse_unsupported__mutmut_*",
        "engine.serve.openai.xǁUnsupportedǁ__init____mutmut_*",
    ],
}

# mutants that change no behaviour: name -> why (docs/testing.md lists them too)
EQUIVALENT: dict[str, str] = {
    "engine.config.xǁEngineConfigǁvalidate__mutmut_8": 'float("INF") is float("inf")',
    "engine.kv.codec.x_encode__mutmut_23": "frexp of a finite float32 <= 128: exp - 8 < 127",
    "engine.kv.codec.x_encode__mutmut_31": "frexp of a finite float32 <= 128: exp - 8 < 127",
    "engine.kv.codec.x_decode__mutmut_10": "code * 2**exp rounds once, in float64 or float32",
    "engine.kv.plan.xǁPagePlanǁ_cached_prefix__mutmut_3": "paging off: the cache is empty",
    "engine.serve.openai.x__refuse_unsupported__mutmut_2": "get('n', None): None is allowed too",
    "engine.serve.openai.x__refuse_unsupported__mutmut_4": "get('n'): None is allowed too",
    "engine.serve.openai.x__refuse_unsupported__mutmut_19": "get('best_of', None): None allowed",
    "engine.serve.openai.x__refuse_unsupported__mutmut_21": "get('best_of'): None is allowed too",
    "engine.serve.openai.x_to_request__mutmut_68": "bool(get('stream', None)) is False too",
    "engine.serve.openai.x_to_request__mutmut_70": "bool(get('stream')) is False too",
    "gates.speed.estimate.x__costs__mutmut_8": "check_run refuses action lists of unequal length",
    "gates.speed.estimate.x__costs__mutmut_12": "check_run refuses action lists of unequal length",
    "gates.speed.estimate.x__costs__mutmut_15": "check_run refuses action lists of unequal length",
    "gates.speed.estimate.x_value__mutmut_15": 'float("NAN") is float("nan")',
    "gates.speed.estimate.x_value__mutmut_41": 'float("NAN") is float("nan")',
    "engine.kv.plan.xǁPagePlanǁopen__mutmut_26": "a fresh page has refs 0: = 1 is += 1",
    "engine.kv.plan.xǁPagePlanǁopen__mutmut_31": "a lane's own pages have refs 0: = 1 is += 1",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_5": "paging off: keys are never read",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_14": "a page held twice is cached: none moves it",
    "engine.kv.plan.xǁPagePlanǁrelease__mutmut_22": "page_key's values are never read",
    "engine.lanes.sampling.x__mix__mutmut_1": "its one caller ignores overflow around it",
    "engine.lanes.sampling.x_uniforms__mutmut_22": "astype(None) is astype(float64)",
    "engine.lanes.sampling.x_sample__mutmut_22": "astype(None) is astype(float64)",
    "engine.lanes.sampling.x_logit_hash__mutmut_11": "an 8-byte hexdigest has 16 chars: [:17]",
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
        if name in EQUIVALENT:
            out["equivalent"].append(name)
        elif code in KILLED:
            out["killed"].append(name)
        elif code in SURVIVED:
            out["survived"].append(name)
        else:
            out["other"].append(f"{name} (exit {code})")
    return out


def run_one(module: str, jobs: int) -> dict[str, list[str]]:
    tests = [t for t in MODULES[module] if (ROOT / t).exists()]
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
    return [m for m in MODULES if m in names or any(t in names for t in MODULES[m])]


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
