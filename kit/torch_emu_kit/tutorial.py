"""Runs the shell commands of a tutorial chapter (Markdown) the way a reader types them.

    torch-emu-kit tutorial CHAPTER [--from HEADING] [--workdir DIR] [--list]

It checks that a chapter's commands still work, in CI: torch-emu runs its "Build your own
backend" chapter (docs/guide/build_your_own.md, which states the convention for its readers),
a vendor can run their own chapters. The convention:

- Every ```bash block of the chapter is run, in the chapter's order, in one bash session that
  starts in a fresh temporary directory, so `cd` and `export` carry over from block to block.
  Other blocks (```python, ```text, literalinclude) are never run.
- One line is one command: blank lines and whole-line comments are skipped; continuation lines,
  here-documents and multi-line constructs (if, for, functions) are not allowed.
- A command must exit 0 unless it ends with the comment `# exits N`: the reader is told to expect
  that status (e.g. a conformance tier that fails before the step that adds it), and the runner
  checks it. The first command with another status stops the run.
"""

import argparse
import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

from .argtypes import existing

FENCE = re.compile(r"^(`{3,})(\S*)")
EXPECTED = re.compile(r"\s#\s*exits\s+(\d+)\b")
# Things a line-by-line session cannot run as one command.
UNSUPPORTED = [
    (re.compile(r"\\$"), "a continuation line"),
    (re.compile(r"<<"), "a here-document"),
    (re.compile(r"^(if|then|else|elif|fi|for|while|until|do|done|case|esac|function)\b|^\{|^\}|\(\)\s*\{?$"),
     "a multi-line construct"),
    (re.compile(r"^exit\b"), "`exit`, which would end the session"),
]


@dataclasses.dataclass
class Command:
    line: int  # 1-based line in the chapter
    heading: str  # the last heading above it
    text: str
    expected: int  # exit status


def problem(text: str) -> str | None:
    """Why the runner cannot run ``text`` as one command, or None."""
    for pattern, what in UNSUPPORTED:
        if pattern.search(text):
            return what
    comment = text.partition(" #")[2]
    if "exits" in comment and not EXPECTED.search(text):
        return "an expected status not written as `# exits N`"
    match = EXPECTED.search(text)
    if match and int(match.group(1)) > 255:
        return "an exit status above 255"
    return None


def commands(markdown: str) -> list[Command]:
    """The commands of every ```bash block, in order; raises ValueError for a line it cannot run."""
    found, heading, fence, is_bash = [], "", None, False
    for number, line in enumerate(markdown.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence, is_bash = match.group(1), match.group(2) == "bash"
            elif line.startswith("#"):
                heading = line.lstrip("#").strip()
            continue
        if match and match.group(1) == fence and not match.group(2):
            fence = None
            continue
        text = line.strip()
        if not is_bash or not text or text.startswith("#"):
            continue
        why = problem(text)
        if why:
            raise ValueError(f"line {number}: {text!r} is {why}")
        expected = EXPECTED.search(text)
        found.append(Command(number, heading, text, int(expected.group(1)) if expected else 0))
    if fence is not None:
        raise ValueError("a code block is not closed")
    return found


def starting_at(cmds: list[Command], heading: str | None) -> list[Command]:
    """The commands from the first heading that starts with ``heading`` on."""
    if not heading:
        return cmds
    for i, cmd in enumerate(cmds):
        if cmd.heading.startswith(heading):
            return cmds[i:]
    raise ValueError(f"no command under a heading starting with {heading!r}")


def script(cmds: list[Command], workdir: str, chapter: str) -> str:
    """One bash script: each command as typed, then a check of its status."""
    lines = [
        "set -o pipefail",
        f"cd {shlex.quote(workdir)}",
        "__tutorial_check() { if [ \"$1\" -ne \"$2\" ]; then",
        "  printf 'tutorial: %s: exited %s, expected %s\\n' \"$3\" \"$1\" \"$2\" >&2; exit 1; fi; }",
    ]
    for cmd in cmds:
        where = f"{chapter}:{cmd.line} ({cmd.heading}): {cmd.text}"
        lines += [f"printf '\\n$ %s\\n' {shlex.quote(cmd.text)}", cmd.text,
                  f"__tutorial_check $? {cmd.expected} {shlex.quote(where)}"]
    lines.append("printf '\\ntutorial: all %s commands gave the expected status\\n' " + str(len(cmds)))
    return "\n".join(lines) + "\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("chapter", type=existing("file"), help="the Markdown chapter whose bash blocks to run")
    parser.add_argument("--from", dest="start", metavar="HEADING",
                        help="start at the first command under a heading that starts with HEADING")
    parser.add_argument("--workdir", type=existing("folder"),
                        help="run in DIR (an existing folder) instead of a fresh temporary directory")
    parser.add_argument("--list", action="store_true", help="print the commands and their expected status")


def run(args: argparse.Namespace) -> int:
    path = pathlib.Path(args.chapter)
    try:
        cmds = starting_at(commands(path.read_text()), args.start)
    except ValueError as error:
        print(f"tutorial: {path}: {error}", file=sys.stderr)
        return 2
    if args.list:
        for cmd in cmds:
            print(f"{cmd.line:5d}  exits {cmd.expected}  {cmd.text}")
        return 0
    with tempfile.TemporaryDirectory(prefix="tutorial-") as tmp:
        workdir = os.path.abspath(args.workdir or tmp)
        return subprocess.run(["bash", "-c", script(cmds, workdir, str(path))], stdin=subprocess.DEVNULL).returncode
