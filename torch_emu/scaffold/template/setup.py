"""Builds torch_tpldev._C from csrc/**/*.cpp (ninja, all cores, -O2)."""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

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
