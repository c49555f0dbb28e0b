"""Builds torch_emu._C: the runtime (csrc/runtime), the PrivateUse1 integration
core (csrc/core), the operator registrations (csrc/aten) and the Python
bindings (csrc/python) in one optimised, parallel (ninja) extension."""

import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
# Compile translation units in parallel on every core (ninja honours MAX_JOBS).
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))

sources = sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*.cpp"), recursive=True)
)

setup(
    ext_modules=[
        CppExtension(
            name="torch_emu._C",
            sources=sources,
            include_dirs=[os.path.join(ROOT, "csrc")],
            extra_compile_args=["-O2", "-g0", "-Wno-unused-parameter", "-Wno-interference-size"],
            extra_link_args=["-Wl,--no-as-needed"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
