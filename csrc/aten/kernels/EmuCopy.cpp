// copy_ for emu: host-to-device, device-to-host, device-to-device on one
// device and between two devices (peer), each as runtime memcpy on the
// current stream, synchronous unless non_blocking.
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/real.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "aten/EmuHostAlias.h"
#include "aten/kernels/EmuOps.h"
#include "core/EmuException.h"
#include "core/EmuHostAllocator.h"
#include "core/EmuKernelContext.h"
#include "core/EmuLaunch.h"
#include "core/EmuStream.h"
#include "core/EmuSyncDebug.h"

namespace torch_emu {
namespace {

bool is_emu(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

// A tensor that a memcpy can read or write as one flat block.
bool is_flat(const at::Tensor& t) {
  return t.is_contiguous() && !t.is_conj() && !t.is_neg();
}

// `src` made ready for a flat copy into `dst`: broadcast, cast and made
// contiguous on its own device (a kernel there when it lives on emu).
at::Tensor flat_source_for(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor flat = src.sizes() == dst.sizes() ? src : src.expand_as(dst);
  if (flat.scalar_type() != dst.scalar_type() || !is_flat(flat)) {
    flat = flat.to(dst.scalar_type()).resolve_conj().resolve_neg().contiguous();
  }
  return flat;
}

// A pinned source/destination must not be recycled by the host allocator
// until the asynchronous copy that reads or writes it has run.
void keep_pinned_alive(const at::Tensor& host, const c10::Stream& stream) {
  const c10::DataPtr& data = host.storage().data_ptr();
  if (is_pinned_ptr(data.get())) {
    at::getHostAllocator(c10::DeviceType::PrivateUse1)->record_event(data.get(), data.get_context(), stream);
  }
}

// LITERALINCLUDE START: COPY_MEMCPY
// One flat memcpy on `stream`; waits for it unless non_blocking. Pageable
// host memory makes the runtime finish the copy before returning anyway.
void memcpy_on_stream(void* dst, const void* src, size_t nbytes, emuMemcpyKind kind,
                      const c10::Stream& stream, bool non_blocking) {
  emuStream_t native = native_stream(stream);
  EMU_CHECK(emuMemcpyAsync(dst, src, nbytes, kind, native));
  if (!non_blocking) {
    EMU_CHECK(emuStreamSynchronize(native));
  }
}
// LITERALINCLUDE END: COPY_MEMCPY

// Copy into a non-contiguous destination through a contiguous temporary.
at::Tensor copy_via_contiguous(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  at::Tensor tmp = at::empty(dst.sizes(), dst.options());
  copy_from(src, tmp, non_blocking);
  dst.copy_(tmp, non_blocking);
  return dst;
}

// LITERALINCLUDE START: COPY_WITHIN_DEVICE
at::Tensor copy_within_device(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const c10::Stream stream = current_stream(dst.device().index());
  if (is_flat(src) && is_flat(dst) && src.sizes() == dst.sizes() && src.dtype() == dst.dtype()) {
    memcpy_on_stream(dst.data_ptr(), src.data_ptr(), dst.nbytes(), emuMemcpyDeviceToDevice,
                     stream, /*non_blocking=*/true); // stream order suffices on one device
    return dst;
  }
  // Strided, broadcast or converting copies are a kernel: CPU's copy_ run on
  // the device memory through aliases.
  HostAliases aliases;
  at::Tensor dst_alias = aliases.alias(dst);
  at::Tensor src_alias = aliases.alias(src);
  queue_kernel(
      stream, [&] { dst_alias.copy_(src_alias); },
      [&]() -> std::function<void()> { return [memory = aliases.emu_storages(), dst_alias, src_alias] { dst_alias.copy_(src_alias); }; },
      "copy_within_device", dst.nbytes() + src.nbytes());
  return dst;
}
// LITERALINCLUDE END: COPY_WITHIN_DEVICE

// LITERALINCLUDE START: COPY_PEER
// Like CUDA: the copy runs on the source device's current stream, which first
// waits for the destination's current stream (dst may still be in use), and
// the destination's stream then waits for the copy.
at::Tensor copy_between_devices(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (!is_flat(dst)) {
    return copy_via_contiguous(src, dst, non_blocking);
  }
  const c10::DeviceGuard guard(src.device());
  at::Tensor flat = flat_source_for(src, dst);
  const c10::Stream src_stream = current_stream(src.device().index());
  const c10::Stream dst_stream = current_stream(dst.device().index());
  emuEvent_t dst_ready = nullptr, copied = nullptr;
  EMU_CHECK(emuEventCreateWithFlags(&dst_ready, emuEventDisableTiming));
  EMU_CHECK(emuEventCreateWithFlags(&copied, emuEventDisableTiming));
  EMU_CHECK(emuEventRecord(dst_ready, native_stream(dst_stream)));
  EMU_CHECK(emuStreamWaitEvent(native_stream(src_stream), dst_ready));
  memcpy_on_stream(dst.data_ptr(), flat.data_ptr(), dst.nbytes(), emuMemcpyDeviceToDevice,
                   src_stream, /*non_blocking=*/true);
  EMU_CHECK(emuEventRecord(copied, native_stream(src_stream)));
  EMU_CHECK(emuStreamWaitEvent(native_stream(dst_stream), copied));
  EMU_CHECK(emuEventDestroy(dst_ready));
  EMU_CHECK(emuEventDestroy(copied));
  if (!non_blocking) {
    EMU_CHECK(emuStreamSynchronize(native_stream(dst_stream)));
  }
  return dst;
}
// LITERALINCLUDE END: COPY_PEER

// LITERALINCLUDE START: COPY_HOST
// Host <-> device: one memcpy on the emu device's current stream. With
// non_blocking and pinned host memory the copy stays queued; the pinned block
// is then kept from reuse until the copy has run.
at::Tensor copy_with_host(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  if (!is_flat(dst)) {
    return copy_via_contiguous(src, dst, non_blocking);
  }
  const bool to_device = is_emu(dst);
  const at::Tensor& device_side = to_device ? dst : src;
  const c10::DeviceGuard guard(device_side.device());
  const c10::Stream stream = current_stream(device_side.device().index());
  at::Tensor flat = flat_source_for(src, dst);
  if (!non_blocking) {
    warn_or_error_on_sync(to_device ? "copy host to emu (non_blocking=False)" : "copy emu to host (non_blocking=False)");
  }
  memcpy_on_stream(dst.data_ptr(), flat.const_data_ptr(), dst.nbytes(),
                   to_device ? emuMemcpyHostToDevice : emuMemcpyDeviceToHost, stream, non_blocking);
  if (non_blocking) {
    keep_pinned_alive(to_device ? flat : dst, stream);
  }
  return dst;
}
// LITERALINCLUDE END: COPY_HOST

} // namespace

// LITERALINCLUDE START: COPY_CHECK
// What CPU's and CUDA's copy_ validate before any data moves, checked here on
// the host for every kind of copy, so that a bad copy raises at the call with
// their exception and message (a queued copy kernel would only report it at
// the next sync): the source broadcasts to the destination, no element of the
// destination is written twice, and the two do not partly overlap. A dense
// destination of the source's shape needs only the overlap test; anything
// else is what CPU's TensorIterator checks, so it is built (never run).
void check_copy(const at::Tensor& src, const at::Tensor& dst) {
  if (src.sizes() == dst.sizes() && dst.is_non_overlapping_and_dense()) {
    at::assert_no_partial_overlap(dst, src);
    return;
  }
  (void)at::TensorIteratorConfig()
      .add_output(dst)
      .add_const_input(src)
      .resize_outputs(false)
      .check_all_same_dtype(false)
      .check_all_same_device(false)
      .build();
}
// LITERALINCLUDE END: COPY_CHECK

// LITERALINCLUDE START: COPY_FROM
at::Tensor copy_from(const at::Tensor& from, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(from.layout() == at::kStrided && dst.layout() == at::kStrided,
              "emu supports copies between strided tensors only");
  check_copy(from, dst);
  // A complex source into a real destination keeps its real part. CPU's copy_
  // warns about it; so do we, here on the host, and copy the real part so
  // that no kernel warns again.
  const bool drops_imaginary = from.is_complex() && !dst.is_complex();
  if (drops_imaginary) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }
  const at::Tensor src = drops_imaginary ? at::real(from) : from;
  if (dst.numel() == 0) {
    return dst;
  }
  if (is_emu(src) && is_emu(dst)) {
    return src.device() == dst.device() ? copy_within_device(src, dst, non_blocking)
                                        : copy_between_devices(src, dst, non_blocking);
  }
  TORCH_CHECK(src.is_cpu() || dst.is_cpu(), "cannot copy from ", src.device(), " to ", dst.device());
  if (kernel_device() >= 0) {
    // Inside a kernel: a native kernel's CPU code copying to or from a host
    // tensor it made, which lives in device memory there (EmuLaunch.cpp). The
    // thread running the kernel reaches both sides: copy as CPU does, now.
    HostAliases aliases;
    const at::Tensor host_dst = is_emu(dst) ? aliases.alias(dst) : dst;
    host_dst.copy_(is_emu(src) ? aliases.alias(src) : src);
    return dst;
  }
  return copy_with_host(src, dst, non_blocking);
}
// LITERALINCLUDE END: COPY_FROM

} // namespace torch_emu

// LITERALINCLUDE START: COPY_CONJ_NEG
// copy_from handles conjugate and negative views itself (the kernel's aliases
// carry the bits to CPU's copy_). Without these fallthroughs the Conjugate
// and Negative fallbacks would first materialise the source with clone(),
// whose copy_ comes back here with the same bits: endless recursion.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
// LITERALINCLUDE END: COPY_CONJ_NEG
