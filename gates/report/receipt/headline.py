"""A manifest's verdict line and exit code: what failed, or exactly what could not run.

A run that cannot judge names every part it lost, with counts out of the whole: "⚠️ could
not run: 6 of 6 arms crashed or timed out; 3 gates could not run", never a count of zero.
Arms with no outcome at all (those an interrupted run never finished) are such a part: "85
of 309 arms not run". A drafter whose plain twin failed has its outcome (crashed) and is
counted there, once.
"""

from __future__ import annotations

from gates import EXIT_ARM_FAILED, EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK
from gates.report.view import Manifest
from gates.run.results import Status


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'s' * (k != 1)}"


def _first_line(text: str, cap: int = 120) -> str:
    line = text.strip().partition("\n")[0]
    return line if len(line) <= cap else line[: cap - 1] + "…"


def could_not_run(man: Manifest) -> list[str]:
    """The parts of the run that could not run, each with its count (empty: none)."""
    arms = man.arms
    crashed = [a for a in arms if a.status == Status.CRASHED]
    blocked = [g for g in man.gates if g.status == Status.COULD_NOT_RUN]
    parts = []
    if crashed:
        parts.append(f"{len(crashed)} of {_n(len(arms), 'arm')} crashed or timed out")
    unrun = sum(1 for a in arms if a.status is None)
    if unrun:
        parts.append(f"{unrun} of {_n(len(arms), 'arm')} not run")
    if blocked:
        verb = "gate" if len(blocked) == 1 else "gates"
        parts.append(f"{len(blocked)} of {len(man.gates)} {verb} could not run")
    speed = man.speed
    if speed is not None and speed.status == Status.COULD_NOT_RUN:
        parts.append(f"speed could not run ({_first_line(speed.reason)})")
    return parts


def verdict(man: Manifest) -> tuple[str, int]:
    """(verdict line, exit code) of a manifest."""
    gates = man.gates
    failed = [g.name for g in gates if g.status == Status.FAIL]
    speed = man.speed
    if speed is not None and speed.status == Status.FAIL:
        failed.append("speed")
    bad = man.bad_values
    if bad:
        return f"❌ bad matrix: {bad[0]}", EXIT_BAD_INPUT
    if failed:
        return f"❌ {_n(len(failed), 'gate')} failed: {', '.join(failed)}", EXIT_GATE_FAILED
    lost = could_not_run(man)
    if lost:
        return f"⚠️ could not run: {'; '.join(lost)}", EXIT_ARM_FAILED
    arms = man.arms
    nc = [a for a in arms if a.not_comparable]
    if not any(g.status == Status.PASS for g in gates):
        what = "no gate has a comparison"
        if nc:
            what = (
                f"{len(nc)} of {_n(len(arms), 'arm')} not comparable: {_first_line(nc[0].reason)}"
            )
        return f"⚠️ nothing could be compared ({what})", EXIT_ARM_FAILED
    notes = [f"{len(nc)} of {_n(len(arms), 'arm')} not comparable"] if nc else []
    taken = [a.cell for a in man.accepted if a.applied]
    if taken:
        notes.append(f"slower {', '.join(taken)} accepted")
    extra = f" ({'; '.join(notes)})" if notes else ""
    return f"✅ all hold{extra}", EXIT_OK
