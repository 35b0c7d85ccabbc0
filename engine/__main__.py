"""python -m engine generate | run | bench | serve | capabilities"""

from __future__ import annotations

import argparse
import sys

from engine.errors import EngineFailure, InputError


def build_parser() -> argparse.ArgumentParser:
    from engine.cli import bench, capabilities, generate, run

    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (generate, run, bench, capabilities):
        module.add_parser(sub)
    try:
        from engine.serve import cli as serve_cli

        serve_cli.add_parser(sub)
    except ImportError:
        pass
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
