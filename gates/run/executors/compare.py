"""Two receipts of one matrix, compared arm for arm and gate for gate.

    python -m gates.run.executors.compare LOCAL.json RAY.json [--results LOCAL_DIR RAY_DIR]

Made to show that ``--executor ray`` gives what a local run gives (docs/ray.md), it
compares any two manifests of the same matrix, commits and machine:

* the run: verdict, exit code, arm count, base and head commits;
* every arm (by id): side, config, store key, status, reason, dropped requests, and each
  reply's summary (id, token count, token hash, finish reason);
* with ``--results`` (each run's ``$GATES_CACHE/results``): each arm's stored result in full,
  the replies with every token id, text, margin and logit bit hash, the engine's counters
  and the schedule trace, timings left out;
* every gate: name, kind, status, counts, cells and entries (diffs, values, notices).

What may differ is left out: wall and CPU times, where an arm ran (``device``, ``argv``,
``stderr_tail``), whether it came from the cache. A file named in a stored result (a test
drafter's truth file: ``truth/<key>.jsonl`` on the runner, ``ray/assets/<hash>/file.jsonl``
on a Ray worker) is compared by its content's hash, not its path. A served arm's counters of
work done (``rounds``, ``steps``, ``decode_tokens``, ``prefill_tokens``) are left out: they
move with when the server sees each client arrive and hang up (quick's served arms have two
clients that close their stream after N tokens), while its replies are compared in full.
One line per difference, then a summary; exit 0 when equal, 1 when not, 2 for a file that
does not read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

from gates.jsontypes import JsonObject

# timings: wall_s, cpu_s, t_ms, ms, tok_s ... (a number that the clock, not the engine, decides)
TIMING = re.compile(r"(^|_)(s|ms)$")
ARM_FIELDS = ("side", "label", "config", "key", "status", "reason", "dropped", "replies")
RUN_FIELDS = ("status", "exit_code", "replies", "metrics", "trace")
SERVED_TIMED = ("rounds", "steps", "decode_tokens", "prefill_tokens")  # a served arm's


def located(obj: Any) -> Any:
    """``obj`` with each absolute path replaced by what it holds: a file by its content's
    hash, anything else by ``<path>``."""
    if isinstance(obj, dict):
        return {k: located(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [located(v) for v in obj]
    if isinstance(obj, str) and obj.startswith("/") and "\n" not in obj:
        p = Path(obj)
        if p.is_file():
            return f"<file sha256 {hashlib.sha256(p.read_bytes()).hexdigest()[:16]}>"
        return "<path>"
    return obj


def as_run(stored: JsonObject, served: bool) -> JsonObject:
    """A stored result's fields that a run decides: no timings, files by content, and no
    served arm's counters of work (see the module's docstring)."""
    run = located(untimed({f: stored.get(f) for f in RUN_FIELDS}))
    if served and isinstance(run.get("metrics"), dict):
        run["metrics"] = {k: v for k, v in run["metrics"].items() if k not in SERVED_TIMED}
    return run


def untimed(obj: Any) -> Any:
    """``obj`` without the keys that hold timings, at any depth."""
    if isinstance(obj, dict):
        return {k: untimed(v) for k, v in obj.items() if not TIMING.search(str(k))}
    if isinstance(obj, list):
        return [untimed(v) for v in obj]
    return obj


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def diff(a: Any, b: Any, where: str, out: list[str]) -> None:
    """Append one line per leaf where ``a`` and ``b`` differ (dict keys and list items)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                side = "first" if k in a else "second"
                out.append(f"{where}.{k}: only in the {side}: {_short(a.get(k, b.get(k)))}")
            else:
                diff(a[k], b[k], f"{where}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diff(x, y, f"{where}[{i}]", out)
    elif a != b or type(a) is not type(b):
        out.append(f"{where}: {_short(a)} != {_short(b)}")


def read(path: Path) -> JsonObject:
    try:
        man = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SystemExit(f"compare: {path}: not a readable JSON manifest ({e})") from None
    if not isinstance(man, dict) or not isinstance(man.get("arms"), list):
        raise SystemExit(f"compare: {path}: no 'arms' list: not a gates manifest")
    return man


def stored(results: Path | None, key: str | None) -> JsonObject | None:
    if results is None or not key:
        return None
    path = results / key[:2] / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def compare(
    a: JsonObject, b: JsonObject, results: tuple[Path, Path] | None = None
) -> tuple[list[str], dict[str, int]]:
    """Every difference between two manifests, and what was compared (counts)."""
    out: list[str] = []
    for k in ("verdict", "exit_code"):
        diff(a.get(k), b.get(k), k, out)
    for side in ("base", "head"):
        diff(a[side]["sha"], b[side]["sha"], f"{side}.sha", out)
    diff(a["matrix"]["arms"], b["matrix"]["arms"], "matrix.arms", out)
    arms_a = {x["id"]: x for x in a["arms"]}
    arms_b = {x["id"]: x for x in b["arms"]}
    for only, name in (
        (arms_a.keys() - arms_b.keys(), "first"),
        (arms_b.keys() - arms_a.keys(), "second"),
    ):
        out += [f"arm {i}: only in the {name}" for i in sorted(only)]
    n = {"arms": 0, "ran": 0, "replies": 0, "stored": 0, "gates": 0, "entries": 0}
    for i in sorted(arms_a.keys() & arms_b.keys()):
        x, y = arms_a[i], arms_b[i]
        n["arms"] += 1
        n["ran"] += x.get("status") in ("ok", "crashed", "refused")
        n["replies"] += len(x.get("replies") or [])
        for f in ARM_FIELDS:
            diff(x.get(f), y.get(f), f"arm {i}: {f}", out)
        if results is not None:
            sa, sb = stored(results[0], x.get("key")), stored(results[1], y.get("key"))
            if (sa is None) != (sb is None):
                out.append(f"arm {i}: stored result only in the {'first' if sa else 'second'}")
            elif sa is not None and sb is not None:
                n["stored"] += 1
                served = bool((x.get("config") or {}).get("served"))
                diff(as_run(sa, served), as_run(sb, served), f"arm {i}: stored", out)
    gates_a = {g["name"]: g for g in a.get("gates", [])}
    gates_b = {g["name"]: g for g in b.get("gates", [])}
    diff(list(gates_a), list(gates_b), "gate names", out)
    for name in gates_a.keys() & gates_b.keys():
        n["gates"] += 1
        n["entries"] += len(gates_a[name].get("entries", []))
        ga = {k: v for k, v in gates_a[name].items() if k != "entries"}
        gb = {k: v for k, v in gates_b[name].items() if k != "entries"}
        diff(ga, gb, f"gate {name!r}", out)
        ea = [_entry(e) for e in gates_a[name].get("entries", [])]
        eb = [_entry(e) for e in gates_b[name].get("entries", [])]
        diff(ea, eb, f"gate {name!r}: entries", out)
    return out, n


def _entry(e: JsonObject) -> JsonObject:
    """A gate entry as it decides: its engine's stderr is where it ran, not what it found."""
    return untimed({k: v for k, v in e.items() if k != "stderr_tail"})


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gates.run.executors.compare", description=__doc__)
    p.add_argument("first", type=Path, help="a manifest (receipts/<...>.json)")
    p.add_argument("second", type=Path, help="another manifest of the same matrix")
    p.add_argument(
        "--results",
        nargs=2,
        type=Path,
        metavar=("FIRST_DIR", "SECOND_DIR"),
        help="each run's result store ($GATES_CACHE/results): compare the full stored results",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        first, second = read(a.first), read(a.second)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    if a.results:
        for d in a.results:
            if not d.is_dir():
                print(f"compare: --results {d}: not a folder", file=sys.stderr)
                return 2
    found, n = compare(first, second, tuple(a.results) if a.results else None)
    for line in found:
        print(line)
    what = (
        f"{n['arms']} arms ({n['ran']} ran, {n['replies']} reply summaries"
        + (f", {n['stored']} stored results in full" if a.results else "")
        + f"), {n['gates']} gates ({n['entries']} entries)"
    )
    if found:
        print(f"DIFFERENT: {len(found)} difference(s) over {what}")
        return 1
    print(f"EQUAL: {what}; verdict {first.get('verdict')!r}, exit {first.get('exit_code')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
