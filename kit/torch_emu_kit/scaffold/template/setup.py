"""Builds torch_tpldev._C from csrc/**/*.cpp (ninja, all cores, -O2)."""

import glob
import os

# The build imports torch, which would autoload this very backend once it is installed
# (pip install -e .): a rebuild must not need the library it is rebuilding.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

setup(
    ext_modules=[
        CppExtension(
            "torch_tpldev._C",
            sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(HERE, "csrc", "**", "*.cpp"), recursive=True)),
            include_dirs=[os.path.join(HERE, "csrc")],
            extra_compile_args=["-O2", "-std=c++17"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
