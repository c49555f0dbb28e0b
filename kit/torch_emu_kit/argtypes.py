"""Checks of command-line values, shaped as argparse types: a bad value is refused at once, with
one line naming it, before any work is done.

Shared by the kit's commands (conformance, upstream, new) and by torch-emu's own
(``python -m torch_emu demo --steps``).
"""

import argparse
import os
import pathlib


class BadArgument(argparse.ArgumentTypeError, ValueError):
    """argparse prints it as ``error: argument --flag: message``; callers outside argparse
    (scaffold.generate) catch it as the ValueError it also is."""


def positive(kind: type):
    """The type of a timeout or a count: a number of `kind` above 0."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:  # `not >` also refuses nan
            raise BadArgument(f"must be a positive {'integer' if kind is int else 'number'}, not {text!r}")
        return value

    return convert


def existing(kind: str):
    """The type of an input the command reads: a "file" or a "folder" that exists."""
    is_kind = os.path.isfile if kind == "file" else os.path.isdir

    def convert(text: str) -> str:
        path = os.path.expanduser(text)
        if not is_kind(path):
            raise BadArgument(f"no such {kind}: {text}")
        return path

    return convert


def output_file(text: str) -> str:
    """A file the command writes at its end: opened for appending now (which changes nothing),
    so that a run is not lost to a path it cannot write."""
    path = os.path.expanduser(text)
    existed = os.path.lexists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise BadArgument(f"cannot write {text}: {e.strerror}") from None
    if not existed:
        os.remove(path)
    return path


def output_folder(text: str) -> str:
    """A folder the command creates or writes into: an existing one must be writable; a new one
    is made now, with its missing parents, and removed again."""
    path = pathlib.Path(text).expanduser().absolute()
    if os.path.isdir(path):
        if not os.access(path, os.W_OK):
            raise BadArgument(f"cannot write into {text}: permission denied")
        return str(path)
    missing = [p for p in (path, *path.parents) if not os.path.exists(p)]  # os.path: no error on a long name
    try:
        path.mkdir(parents=True)
    except OSError as e:
        raise BadArgument(f"cannot create {text}: {e.strerror}") from None
    finally:
        for p in missing:  # deepest first
            if os.path.isdir(p):
                p.rmdir()
    return str(path)
