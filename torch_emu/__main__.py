"""``python -m torch_emu <command>``: the project's command line."""

import argparse
import sys

from .conformance.argtypes import positive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_emu", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train a small model on emu and compare it with CPU")
    demo.add_argument("--steps", type=positive(int), default=300, help="training steps (default 300)")
    demo.add_argument("--device", default="emu:0", help="emu device to train on (default emu:0)")
    cov = commands.add_parser("coverage", help="how emu runs every aten operator (native, fallback...)")
    cov.add_argument("--json", action="store_true", help="print JSON instead of a table")
    cov.add_argument("--kind", choices=["native", "fallback", "composite", "unsupported"],
                     help="list only operators of this kind (the totals stay complete)")
    conf = commands.add_parser("conformance", help="check the loaded PrivateUse1 backend tier by tier")
    from .conformance.runner import add_arguments

    add_arguments(conf)
    upstream = commands.add_parser("upstream", help="PyTorch's device-generic test files on the loaded backend and on "
                                   "CPU, paired: which tests fail on the device only")
    from .conformance import upstream as upstream_runner

    upstream_runner.add_arguments(upstream)
    new = commands.add_parser("new", help="write a new, independent PrivateUse1 backend package to start from")
    new.add_argument("name", help="device name, also the package's (torch_NAME): a lowercase identifier")
    new.add_argument("--dir", help="directory to write (default ./NAME); must not exist or be empty")
    args = parser.parse_args(argv)
    if args.command == "conformance":
        from .conformance.runner import run as run_conformance

        return run_conformance(args)
    if args.command == "upstream":
        return upstream_runner.run(args)
    if args.command == "new":
        from .scaffold import generate

        try:
            path = generate(args.name, args.dir or args.name)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote torch_{args.name} to {path}\nnext: cd {path} && bash scripts/setup.sh && bash scripts/test.sh")
        return 0
    if args.command == "coverage":
        from .tools import coverage_table

        try:
            print(coverage_table(as_json=args.json, kind=args.kind))
        except BrokenPipeError:  # `... coverage | head`: the reader has what it wanted
            sys.stdout = None  # nothing left to flush at exit
        return 0
    if args.command == "demo":
        from .demo import run

        try:
            return run(steps=args.steps, device=args.device)
        except (RuntimeError, ValueError) as e:  # bad --device, bad configuration
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
