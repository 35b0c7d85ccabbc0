"""``python -m gates merge SHARD.json...``: join the shards of one run into one receipt.

The shards must be of one base, head, matrix file, fixtures and harness version, and every
shard 1..n must be there exactly once; anything else is bad input (exit 2), because a receipt
over part of a matrix would read as a green one. The matrix, prompt sets and models are read
from the repository here (checked against the hashes the shards ran with), the gates are
evaluated over all arms, and the receipt is written as by an unsharded run.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from gates import BadInput
from gates.jsontypes import JsonObject
from gates.judge.kinds import KINDS
from gates.plan import hashes
from gates.plan.build import Arm
from gates.plan.inputs import Inputs, load_inputs
from gates.report import manifest
from gates.run import refs, shard
from gates.run.info import RunInfo
from gates.run.results import ArmResult, ArmRun

SAME = (  # what every shard of one run shares: (what, how to read it)
    ("base", lambda d: d["run"]["base"]["sha"]),
    ("head", lambda d: d["run"]["head"]["sha"]),
    ("matrix", lambda d: d["matrix"]["sha256"]),
    ("matrix path", lambda d: d["matrix"]["path"]),
    ("fixtures", lambda d: json.dumps(d["fixtures"], sort_keys=True)),
    ("harness version", lambda d: d["harness_version"]),
    ("shard count", lambda d: d["shard"][1]),
)


def load(path: str) -> JsonObject:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadInput(f"{path}: not a shard manifest: {e}") from None
    if not isinstance(doc, dict) or doc.get("kind") != shard.KIND:
        raise BadInput(f"{path}: not a shard manifest (write one with `run --shard i/n`)")
    return doc


def check_shards(docs: list[tuple[str, JsonObject]]) -> None:
    """Refuse shards of different runs, a shard given twice, and missing shards."""
    p0, first = docs[0]
    for p, d in docs[1:]:
        for what, get in SAME:
            if get(d) != get(first):
                a, b = str(get(d))[:40], str(get(first))[:40]
                raise BadInput(f"{p}: {what} {a} differs from {b} in {p0}: not shards of one run")
    n = first["shard"][1]
    seen: dict[int, str] = {}
    for p, d in docs:
        i = d["shard"][0]
        if i in seen:
            raise BadInput(f"{p}: shard {i}/{n} given twice (also {seen[i]})")
        seen[i] = p
    missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in seen]
    if missing:
        raise BadInput(f"merge: shard {', '.join(missing)} missing (got {len(docs)} of {n})")


def check_inputs(inp: Inputs, first: JsonObject, p0: str) -> None:
    if hashes.hash_file(inp.mpath) != first["matrix"]["sha256"]:
        raise BadInput(f"{inp.mpath}: not the matrix file the shards ran ({p0})")
    for k, v in first["fixtures"].items():
        if inp.fixtures.get(k) != v:
            raise BadInput(f"{k}: differs here from the one the shards ran with ({p0})")
    if len(inp.the_plan.arms) != first["matrix"]["arms"]:
        raise BadInput(
            f"{inp.mpath}: plans {len(inp.the_plan.arms)} arms, the shards' plan had "
            f"{first['matrix']['arms']}"
        )


def gather(
    docs: list[tuple[str, JsonObject]], arms: list[Arm]
) -> tuple[list[ArmResult], dict[Arm, ArmRun]]:
    """Rows in plan order and results by arm, from all shards; every arm exactly once."""
    rows: list[ArmResult | None] = [None] * len(arms)
    results: dict[Arm, ArmRun] = {}
    for p, d in docs:
        for e in d["arms"]:
            k = e["index"]
            if not 0 <= k < len(arms) or arms[k].id != e["id"]:
                raise BadInput(f"{p}: arm {e['id']!r} is not arm {k} of the plan here")
            if rows[k] is not None:
                raise BadInput(f"{p}: arm {e['id']!r} is in two shards")
            try:
                rows[k] = ArmResult.from_json(e["row"])
                if e["result"] is not None:
                    results[arms[k]] = ArmRun.from_json(e["result"])
            except (ValueError, TypeError) as err:
                raise BadInput(f"{p}: arm {e['id']!r}: {err}") from None
    gaps = [arms[k].id for k, r in enumerate(rows) if r is None]
    if gaps:
        raise BadInput(f"merge: {len(gaps)} arm(s) in no shard, e.g. {gaps[0]!r}")
    return [r for r in rows if r is not None], results


def run_info(docs: list[tuple[str, JsonObject]], plan_notes: list[str]) -> RunInfo:
    """The first shard's run facts, with speed from the shard that ran it and every shard's."""
    speed, lean = (  # run by shard 1 only
        next((d["run"][extra] for _, d in docs if d["run"].get(extra)), None)
        for extra in ("speed", "lean")
    )
    shards = [
        {
            "shard": d["shard"][0],
            "of": d["shard"][1],
            "machine": d["run"]["machine"],
            "fingerprint": d["run"]["fingerprint"],
            "arms": len(d["arms"]),
            "ran": d["ran"],
            "wall_s": d["wall_s"],
        }
        for _, d in sorted(docs, key=lambda x: x[1]["shard"][0])
    ]
    notes = [n for _, d in docs for n in d.get("notes", []) if n not in plan_notes]
    fps = sorted({d["run"]["fingerprint"] for _, d in docs})
    if len(fps) > 1:
        notes.append(
            f"the shards ran on {len(fps)} kinds of machine ({', '.join(fps)}): a comparison "
            "between arms of two shards compares machines too"
        )
    return dataclasses.replace(
        RunInfo.from_json(docs[0][1]["run"]),
        speed=speed,
        lean=lean,
        workers=sum(d["run"]["workers"] for _, d in docs),
        shards=shards,
        notes=list(dict.fromkeys(notes)),
    )


def main(paths: list[str], repo_path: str, out: str | None) -> int:
    if not paths:
        raise BadInput("merge: no shard manifests given")
    docs = [(p, load(p)) for p in paths]
    check_shards(docs)
    p0, first = docs[0]
    root = refs.repo_root(refs.open_repo(repo_path))
    inp = load_inputs(root, first["matrix"]["path"], KINDS)
    check_inputs(inp, first, p0)
    rows, results = gather(docs, inp.the_plan.arms)
    info = run_info(docs, inp.the_plan.notes)
    out_dir = Path(out) if out else root / "receipts"
    manifest.receipts_writable(out_dir)
    ran = sum(d["ran"] for _, d in docs)
    wall = max(d["wall_s"] for _, d in docs)
    return manifest.report(inp, info, rows, results, ran, out_dir, wall)
