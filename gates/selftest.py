"""``python -m gates selftest``: can the harness still see a difference?

On the bundled model, with the engine of one commit (HEAD by default):

* positive control: the same arm run twice must give equal tokens for every request
  (the harness invents no difference);
* negative control: the same arm with planted changes must differ exactly where planted:
  one request asks for one more token (it must differ at index max_tokens, and nowhere
  else), and two requests get their last prompt token changed (at least one must differ).
  No other request may differ.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from gates import EXIT_ARM_FAILED, EXIT_GATE_FAILED, EXIT_OK, BadInput
from gates.judge.checks import equality
from gates.judge.diffs import BitsDiff, Diff, TokensDiff
from gates.plan import prompts
from gates.plan.arm_config import ArmConfig
from gates.plan.matrix import AXIS_DEFAULTS
from gates.plan.request import PromptRequest
from gates.run import refs
from gates.run.contract import missing
from gates.run.execute import ArmJob, base_env, capabilities, run_arm
from gates.run.results import ArmRun


def _plant(
    reqs: list[PromptRequest], base: ArmRun, max_tokens: int
) -> tuple[list[PromptRequest], str | None, list[str]]:
    """Planted copies: (requests, the id asking one more token, ids with a changed prompt)."""
    out = list(reqs)
    by_id = {r.id: r for r in base.replies or []}

    def limit(r: PromptRequest) -> int:
        return max_tokens if r.max_tokens is None else r.max_tokens

    full = [i for i, r in enumerate(out) if by_id[r.id].finish_reason == "length" and limit(r) > 1]
    longer = None
    if full:
        longer = out[full[0]].id
        out[full[0]] = out[full[0]].edited(max_tokens=limit(out[full[0]]) + 1)
    changed = []
    for i, r in enumerate(out):
        if len(changed) == 2:
            break
        if r.id == longer or limit(r) < 2:
            continue
        if r.prompt_ids is not None:
            ids = list(r.prompt_ids)
            ids[-1] = 3 + (ids[-1] - 2) % 997
            out[i] = r.edited(prompt_ids=ids)
        elif r.prompt is not None:
            out[i] = r.edited(prompt=r.prompt + " Then stop.")
        else:
            continue
        changed.append(r.id)
    return out, longer, changed


def main(
    repo_path: str,
    model: str = "fixtures/models/tiny-qwen3",
    backend: str = "numpy",
    max_tokens: int = 8,
    prompt_set: str = "quick",
    ref: str = "HEAD",
) -> int:
    t0 = time.monotonic()
    repo = refs.open_repo(repo_path)
    root = refs.repo_root(repo)
    model_dir = root / model if not Path(model).is_absolute() else Path(model)
    if not model_dir.is_dir():
        raise BadInput(f"selftest: model {model!r} is not a directory under {root}")
    side = refs.side(repo, "head", ref)
    if side.engine_tree is None:
        raise BadInput(f"selftest: {ref} has no engine/")
    worktree = refs.ensure_worktree(repo, side.sha)
    cache = refs.cache_root()
    caps, why = capabilities(worktree, cache)
    axes = {**AXIS_DEFAULTS, "model": model, "backend": backend, "prompts": prompt_set}
    axes |= {"parallel": 4, "paging": "on"}
    config = ArmConfig(**axes, pages=256, max_tokens=max_tokens)
    why = why or (missing(caps, config) if caps else "")
    if why:
        print(f"selftest: cannot run: {why}")
        return EXIT_ARM_FAILED
    reqs = prompts.requests_for(prompts.load(prompts.resolve_path(root, prompt_set)), max_tokens)
    scratch = cache / "runs" / f"selftest-{side.sha[:12]}"
    run = _runner(worktree, config, model_dir, scratch, base_env(worktree, backend, {}, cache))
    decode = equality.make_decoder(model_dir)
    print(
        f"selftest: {model} on {backend}, engine of {ref} ({side.sha[:10]}), "
        f"{len(reqs)} requests, max_tokens {max_tokens}, 4 lanes, paging on"
    )
    try:
        first, second = run("first", reqs), run("second", reqs)
        planted, longer, changed = _plant(reqs, first, max_tokens)
        third = run("planted", planted)
    except RuntimeError as e:
        print(f"selftest: an arm could not run: {e}")
        return EXIT_ARM_FAILED
    ok = _positive(first, second, decode)
    ok &= _negative(first, third, longer, changed, decode)
    margins = all(r.margins is not None for r in first.replies or [])
    print(f"  {'✅' if margins else '⚠️'} replies carry margins: {'yes' if margins else 'no'}")
    print(
        (
            "The harness can see a difference."
            if ok
            else "The harness can NOT be trusted: a control failed."
        )
        + f" ({time.monotonic() - t0:.1f}s)"
    )
    sys.stdout.flush()
    return EXIT_OK if ok else EXIT_GATE_FAILED


def _runner(
    worktree: Path, config: ArmConfig, model_dir: Path, scratch: Path, env: dict[str, str]
) -> Callable[[str, list[PromptRequest]], ArmRun]:
    """Run the selftest's arm on some requests (tag: first, second, planted)."""

    def run(tag: str, requests: list[PromptRequest]) -> ArmRun:
        job = ArmJob(
            key=f"selftest-{tag}",
            label=tag,
            worktree=worktree,
            config=config,
            model=model_dir,
            requests=prompts.encode(requests),
            timeout=600,
            workdir=Path(f"{scratch}-{tag}-{os.getpid()}"),
            env=env,
        )
        r = run_arm(job)
        if not r.ok:
            raise RuntimeError(f"{tag} arm {r.reason}: {r.stderr_tail[-500:]}")
        return r

    return run


def _positive(first: ArmRun, second: ArmRun, decode: equality.Decoder | None) -> bool:
    """The same arm twice: every request equal."""
    pos = equality.compare(first, second, decode=decode)
    good = pos.all_equal and pos.total > 0
    print(
        f"  {'✅' if good else '❌'} positive control: the same arm twice: "
        f"{pos.matched}/{pos.total} equal (expected all)"
    )
    return good


def _negative(
    first: ArmRun,
    third: ArmRun,
    longer: str | None,
    changed: list[str],
    decode: equality.Decoder | None,
) -> bool:
    """The planted arm: differs where planted (the longer reply at its last index, one
    changed prompt at least), and nowhere else."""
    neg = equality.compare(first, third, decode=decode)
    seen = {d.id: d for d in neg.diffs}
    expected = {i for i in [longer, *changed] if i}
    stray = sorted(set(seen) - expected)
    len_ok = (
        longer is not None
        and longer in seen
        and seen[longer].index == next(len(r.ids) for r in first.replies or [] if r.id == longer)
    )
    prompt_ok = any(i in seen for i in changed)
    good = len_ok and prompt_ok and not stray
    print(
        f"  {'✅' if good else '❌'} negative control: planted one extra token in "
        f"`{longer}` and a changed last prompt token in {', '.join(f'`{c}`' for c in changed)}"
        f": {len(seen)} differ ({', '.join(sorted(seen)) or 'none'})"
    )
    if not len_ok:
        print(f"     the one-token tail of `{longer}` was not seen at its last index")
    if not prompt_ok:
        print("     no changed prompt changed its reply (the model may ignore the last token)")
    if stray:
        print(f"     requests differ that were not planted: {', '.join(stray)}")
    for rid in changed:
        if rid in seen:
            a_ids, b_ids, margin = _window(seen[rid])
            print(
                f"     `{rid}` differs from index {seen[rid].index}: {a_ids} vs "
                f"{b_ids}, margin there {margin}"
            )
            break
    return good


def _window(d: Diff) -> tuple[list[int] | None, list[int] | None, float | None]:
    """(a's ids, b's ids, a's margin) from where a request parts, as far as it records them."""
    if isinstance(d, TokensDiff) and d.a_ids is not None:
        return list(d.a_ids), list(d.b_ids or ()), d.a_margin
    if isinstance(d, BitsDiff) and d.a_ids is not None:
        return list(d.a_ids), None, d.a_margin
    return None, None, None
