"""nox sessions of the gate runner, imported by noxfile.py.

    nox -s gates -- --base main --head HEAD [--matrix matrices/quick.yaml]
    nox -s gates -- selftest | show | clean | lean --base main
    nox -s lean -- --base main --head HEAD

nox turns every non-zero exit into its own failure (exit 1); run `python -m gates ...`
directly to see the gate runner's exit codes (1 gate failed, 2 bad input, 3 arm failed).
"""

from __future__ import annotations

import nox

SUBCOMMANDS = ("run", "lean", "show", "selftest", "clean")


@nox.session
def gates(session: nox.Session) -> None:
    """Run the gate matrix between two commits and write a receipt (receipts/)."""
    session.install("-e", ".")
    args = list(session.posargs)
    if not args or args[0] not in SUBCOMMANDS:
        args = ["run", *args]
    session.run("python", "-m", "gates", *args)


@nox.session
def lean(session: nox.Session) -> None:
    """New ruff problems on --head (default HEAD) against the merge base with --base (main)."""
    session.install("-e", ".", "ruff>=0.6")
    session.run("python", "-m", "gates", "lean", *session.posargs)
