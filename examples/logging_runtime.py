"""A runtime that logs every call, then lets the reference runtime make it.

    PYTHONPATH=examples TORCH_EMU_RUNTIME=logging_runtime:LoggingRuntime python train.py
"""
# LITERALINCLUDE START: LOGGING_RUNTIME
import sys

from torch_emu.runtime.reference import ReferenceRuntime


class LoggingRuntime(ReferenceRuntime):
    def __getattribute__(self, name):
        method = super().__getattribute__(name)
        if name.startswith("_") or not callable(method):
            return method

        def logged(*args):
            print(f"emu runtime: {name}{args}", file=sys.stderr)
            return method(*args)

        return logged
# LITERALINCLUDE END: LOGGING_RUNTIME
