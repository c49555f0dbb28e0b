"""Builds torch_emu_examples._C, the C++ operator registration examples, against
an installed torch-emu (its headers are the repository's csrc/)."""

import glob
import os
import sys

# Building must not load an installed torch-emu (autoload): a stale or broken _C would fail it.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from build_flags import OPTIMISED, STUB_CAPABILITIES, WARNINGS  # noqa: E402

os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))


class IncrementalBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """Objects stay in build/ so that a rebuild compiles only what changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(HERE, "build", "temp")


setup(
    ext_modules=[
        CppExtension(
            name="torch_emu_examples._C",
            sources=sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "csrc", "*.cpp"))),
            include_dirs=[os.path.join(REPO, "csrc")],
            extra_compile_args=OPTIMISED + WARNINGS + STUB_CAPABILITIES,
        )
    ],
    cmdclass={"build_ext": IncrementalBuildExtension},
)
