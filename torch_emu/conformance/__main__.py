"""``python path/to/torch_emu/conformance [options]``: the conformance suite without torch_emu.

``python -m torch_emu conformance`` imports the ``torch_emu`` package, which loads emu. In a
vendor's environment another backend owns PrivateUse1 and emu must not load at all, so the suite
also runs as a directory: ``python <torch-emu checkout>/torch_emu/conformance --tier device``.
The runner, the worker and the checks need nothing of torch_emu.
"""

import sys

if __package__:  # python -m torch_emu.conformance
    from .runner import main
else:  # python path/to/conformance: Python puts this folder first on sys.path
    from runner import main

if __name__ == "__main__":
    sys.exit(main())
