"""The kit's command line, ``torch-emu-kit COMMAND`` (or ``python -m torch_emu_kit COMMAND``).

Each command is a module with ``add_arguments(parser)`` and ``run(args) -> exit status``.
``add_commands`` is also how a backend's own command line offers them (``python -m torch_emu
conformance`` forwards here), so there is one implementation of each.
"""

import argparse

from . import scaffold, tutorial
from .conformance import runner, upstream

COMMANDS = {
    "conformance": (runner, "check the loaded PrivateUse1 backend tier by tier"),
    "upstream": (upstream, "PyTorch's device-generic test files on the loaded backend and on CPU, paired: "
                           "which tests fail on the device only"),
    "new": (scaffold, "write a new, independent PrivateUse1 backend package to start from"),
    "tutorial": (tutorial, "run the bash commands of a tutorial chapter as a reader types them, checking each status"),
}


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds the kit's commands to ``commands`` (``parser.add_subparsers()``); a parsed command
    line's ``args.run(args)`` then runs the command."""
    for name, (module, summary) in COMMANDS.items():
        parser = commands.add_parser(name, help=summary, description=summary)
        module.add_arguments(parser)
        parser.set_defaults(run=module.run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="torch-emu-kit", description="torch-emu's kit for PrivateUse1 backends: "
                                     "conformance suite, upstream-suite runner, scaffold, tutorial runner")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.run(args)
