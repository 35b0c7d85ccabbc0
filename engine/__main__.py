"""python -m engine generate | run | bench | serve | capabilities"""

from __future__ import annotations

import argparse
import os
import sys

# Fixed-shape tiles of 8 rows gain nothing from BLAS threads, and threads that spin on an
# oversubscribed machine stall each call for milliseconds. Export the variable to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from engine.errors import EngineFailure, InputError


def build_parser() -> argparse.ArgumentParser:
    from engine.cli import bench, capabilities, generate, run, serve

    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (generate, run, bench, serve, capabilities):
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EngineFailure as exc:
        print(f"engine failure: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
