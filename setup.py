"""Builds torch_emu._C: the PrivateUse1 integration core (csrc/core), the
operator registrations (csrc/aten), the profiler plugin, distributed glue and
the Python bindings (csrc/python) in one optimised, parallel (ninja) extension,
linked with the runtime's library (csrc/runtime, built by
scripts/build_runtime.py, the recipe the native tests and the sanitizers use
too)."""

import glob
import os
import sys

# Building torch-emu must not load an installed torch-emu (a stale or broken
# _C from an earlier build would fail `import torch` through autoload).
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
import torch  # noqa: E402
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import build_runtime  # noqa: E402
from build_flags import OPTIMISED, STUB_CAPABILITIES, WARNINGS  # noqa: E402
# Compile translation units in parallel on every core (ninja honours MAX_JOBS).
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))

# Everything but the runtime, which is a library of its own (below).
sources = sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*.cpp"), recursive=True)
    if os.path.relpath(p, ROOT).split(os.sep)[1] != "runtime"
)

# TORCH_EMU_SANITIZE=address builds the extension with AddressSanitizer and
# UndefinedBehaviorSanitizer, in a build directory of its own
# (scripts/sanitize.sh python; vptr checks off: they would need every library
# in the process built with them).
SANITIZE = os.environ.get("TORCH_EMU_SANITIZE", "")
SANITIZER_FLAGS = {
    "": [],
    "address": ["-fsanitize=address,undefined", "-fno-sanitize=vptr", "-fno-omit-frame-pointer", "-g"],
}[SANITIZE]
# The runtime's library: release, or asan (address + undefined) for a sanitized extension.
RUNTIME_FLAVOUR = "asan" if SANITIZE else "release"


class IncrementalBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """`pip install -e .` builds in a fresh temporary directory each time, so
    ninja would recompile every file. Keeping the objects in build/ lets a
    rebuild compile only what changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", "temp" + (f"-{SANITIZE}" if SANITIZE else ""))

    def build_extensions(self):
        # First the runtime's library (ninja: only what changed). torch's ninja build relinks _C
        # on every build; `depends` tells setuptools too that a rebuilt library makes _C stale.
        build_runtime.build(RUNTIME_FLAVOUR)
        super().build_extensions()


setup(
    ext_modules=[
        CppExtension(
            name="torch_emu._C",
            sources=sources,
            # kineto/: the headers of Kineto's plugin interface (csrc/profiler).
            include_dirs=[os.path.join(ROOT, "csrc"), os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
            extra_compile_args=(["-O1"] + SANITIZER_FLAGS if SANITIZE else OPTIMISED) + WARNINGS + STUB_CAPABILITIES,
            depends=[str(build_runtime.library(RUNTIME_FLAVOUR))],
            # The whole library: _C exports every C entry point of the runtime (build_runtime.py).
            extra_link_args=["-Wl,--no-as-needed"] + build_runtime.link_args(RUNTIME_FLAVOUR) + SANITIZER_FLAGS,
        )
    ],
    cmdclass={"build_ext": IncrementalBuildExtension},
)
