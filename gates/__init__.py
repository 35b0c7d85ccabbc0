"""The gate runner: checks out two commits, runs a matrix of engine arms, and writes a receipt.

``gates`` never imports ``engine``: it runs the engine of each commit's worktree as a
subprocess, through the command-line contract in ``docs/contract.md``.
"""

# Bump when the way an arm is run or recorded changes: cached results of older
# harness versions are then ignored.
HARNESS_VERSION = 2


class BadInput(Exception):
    """A bad matrix, prompt set or ref: exit code 2."""


EXIT_OK = 0
EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_ARM_FAILED = 3
