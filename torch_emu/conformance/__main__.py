"""``python path/to/torch_emu/conformance [options]``: the conformance suite without torch_emu.

``python -m torch_emu conformance`` imports the ``torch_emu`` package, which loads emu. In a
vendor's environment another backend owns PrivateUse1 and emu must not load at all, so the suite
also runs as a directory: ``python <torch-emu checkout>/torch_emu/conformance --tier device``.
The runner, the worker and the checks need nothing of torch_emu.
"""

import importlib.util
import pathlib
import sys

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("_conformance_runner", pathlib.Path(__file__).parent / "runner.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    sys.exit(runner.main())
