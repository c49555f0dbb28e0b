// How a native emu kernel is made from PyTorch's own CPU code.
//
// Emu device memory is host memory, so PyTorch's CPU kernels can read and
// write emu tensors directly. The global fallback does that through the boxed
// dispatcher with CPU aliases of every tensor, which costs about a microsecond
// per op. A native kernel skips both: it is an unboxed kernel registered for
// PrivateUse1 that checks devices, allocates its outputs on emu and runs the
// CPU code on the emu tensors themselves, as one launch on the current stream.
// Three shapes of CPU code are covered:
//   - structured ops (add, mm, softmax...): their meta() computes the output
//     and our subclass allocates it on emu; impl() is the CPU kernel
//     (Structured<Impl>::functional / ::inplace, as PyTorch's generated
//     RegisterCPU.cpp does for CPU);
//   - plain CPU functions that allocate outputs like their inputs
//     (layer_norm_cpu, index_select_cpu_...): OnDevice<fn>;
//   - CPU functions that insist on CPU tensors (batch_norm_cpu): OnHost<fn>,
//     on host aliases inside the launch.
// Device-generic code among them calls DispatchStubs with the tensors' device
// type; each stub's PrivateUse1 slot forwards to its CPU kernel
// (EmuCpuStubs.cpp).

#pragma once

#include "aten/kernels/EmuKernelFunctions.h"  // OnDevice, OnHost
#include "aten/kernels/EmuKernelLaunch.h"     // run_on, queue_on, keep
#include "aten/kernels/EmuKernelStructured.h" // Structured
