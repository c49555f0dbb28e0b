"""``python -m torch_emu_kit COMMAND``: the same as the ``torch-emu-kit`` command."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
