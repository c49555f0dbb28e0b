"""Compiler flags shared by the builds of torch_emu._C (setup.py) and of the
registration examples (examples/registration/setup.py), which include the
same headers."""

import platform

# DispatchStub.h's inline CPU-kernel lookup takes one argument per CPU
# capability libtorch was built with; x86-64 wheels have AVX2 and AVX512 (see
# csrc/aten/kernels/EmuCpuStubs.cpp). A mismatch fails at import with an
# undefined DispatchStubImpl symbol, never silently.
STUB_CAPABILITIES = (
    ["-DHAVE_AVX512_CPU_DEFINITION", "-DHAVE_AVX2_CPU_DEFINITION"]
    if platform.machine() in ("x86_64", "AMD64")
    else []
)

WARNINGS = ["-Wno-unused-parameter", "-Wno-interference-size"]
OPTIMISED = ["-O2", "-g0"]
