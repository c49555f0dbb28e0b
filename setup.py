"""Builds torch_emu._C: the runtime (csrc/runtime), the PrivateUse1 integration
core (csrc/core), the operator registrations (csrc/aten) and the Python
bindings (csrc/python) in one optimised, parallel (ninja) extension."""

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
from build_flags import OPTIMISED, STUB_CAPABILITIES, WARNINGS  # noqa: E402
# Compile translation units in parallel on every core (ninja honours MAX_JOBS).
os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 1))

sources = sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*.cpp"), recursive=True)
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


class IncrementalBuildExtension(BuildExtension.with_options(use_ninja=True)):
    """`pip install -e .` builds in a fresh temporary directory each time, so
    ninja would recompile every file. Keeping the objects in build/ lets a
    rebuild compile only what changed."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(ROOT, "build", "temp" + (f"-{SANITIZE}" if SANITIZE else ""))


setup(
    ext_modules=[
        CppExtension(
            name="torch_emu._C",
            sources=sources,
            # kineto/: the headers of Kineto's plugin interface (csrc/profiler).
            include_dirs=[os.path.join(ROOT, "csrc"), os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
            extra_compile_args=(["-O1"] + SANITIZER_FLAGS if SANITIZE else OPTIMISED) + WARNINGS + STUB_CAPABILITIES,
            extra_link_args=["-Wl,--no-as-needed"] + SANITIZER_FLAGS,
        )
    ],
    cmdclass={"build_ext": IncrementalBuildExtension},
)
