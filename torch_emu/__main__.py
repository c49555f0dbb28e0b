"""``python -m torch_emu <command>``: emu's own commands (demo, coverage) and the kit's
(conformance, upstream, new, tutorial: torch_emu_kit's, forwarded, on emu)."""

import argparse
import sys

from torch_emu_kit.argtypes import positive
from torch_emu_kit.cli import add_commands


def demo(args: argparse.Namespace) -> int:
    from .demo import run

    try:
        return run(steps=args.steps, device=args.device)
    except (RuntimeError, ValueError) as e:  # bad --device, bad configuration
        print(f"error: {e}", file=sys.stderr)
        return 2


def coverage(args: argparse.Namespace) -> int:
    from .tools import coverage_table

    try:
        print(coverage_table(as_json=args.json, kind=args.kind))
    except BrokenPipeError:  # `... coverage | head`: the reader has what it wanted
        sys.stdout = None  # nothing left to flush at exit
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_emu", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    parser_demo = commands.add_parser("demo", help="train a small model on emu and compare it with CPU")
    parser_demo.add_argument("--steps", type=positive(int), default=300, help="training steps (default 300)")
    parser_demo.add_argument("--device", default="emu:0", help="emu device to train on (default emu:0)")
    parser_demo.set_defaults(run=demo)
    cov = commands.add_parser("coverage", help="how emu runs every aten operator (native, fallback...)")
    cov.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cov.add_argument("--kind", choices=["native", "fallback", "composite", "unsupported"],
                     help="list only operators of this kind (the totals stay complete)")
    cov.set_defaults(run=coverage)
    add_commands(commands)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
