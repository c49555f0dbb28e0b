// Copies: emuMemcpy and emuMemcpyAsync. Each copy is planned (which sides are
// device memory, pinned or pageable host memory), checked, then run inline or
// queued on a stream as a work item (streams_internal.h) that copy_bytes runs.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/emu_runtime_env.h"
#include "runtime/streams_internal.h"

namespace emu {

namespace {

// LITERALINCLUDE START: PARALLEL_COPY
// A real copy engine saturates memory bandwidth; one host thread does not. Big
// copies between disjoint ranges are split across the machine's cores (a few
// tens of microseconds of thread start-up against milliseconds of copying).
void move_bytes(void* dst, const void* src, size_t n) {
  constexpr size_t kParallelFrom = 2u << 20;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  const bool disjoint = d + n <= s || s + n <= d;
  // Read once (usable_cores): each call of hardware_concurrency reads the
  // kernel's file of online cores, a microsecond, which a 4-byte copy
  // (.item()) paid every time.
  static const size_t threads = std::min<size_t>(torch_emu::usable_cores(), 8);
  if (n < kParallelFrom || !disjoint || threads == 1) {
    std::memmove(dst, src, n);
    return;
  }
  const size_t chunk = (n / threads + 4095) & ~size_t{4095};
  std::vector<std::thread> helpers;
  for (size_t off = chunk; off < n; off += chunk) {
    helpers.emplace_back([=] {
      std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off, std::min(chunk, n - off));
    });
  }
  std::memcpy(dst, src, std::min(chunk, n));
  for (std::thread& t : helpers) t.join();
}
// LITERALINCLUDE END: PARALLEL_COPY

} // namespace

// `modelled`: the copy takes at least the performance model's time.
void copy_bytes(const Work& w, bool modelled) {
  emu::DeviceWorkScope device_work(w.device_access);
  emu::ActivityScope dst_activity(w.devices[0], /*kernel=*/false);
  emu::ActivityScope src_activity(w.devices[1] != w.devices[0] ? w.devices[1] : -1, /*kernel=*/false);
  const Clock::time_point start = modelled ? Clock::now() : Clock::time_point{};
  move_bytes(w.dst, w.src, w.bytes);
  if (modelled) emu::hold_copy(start, w.devices[0], w.devices[1], w.bytes);
}

namespace {

const char* kind_name(emuMemcpyKind kind) {
  switch (kind) {
    case emuMemcpyHostToHost: return "HostToHost";
    case emuMemcpyHostToDevice: return "HostToDevice";
    case emuMemcpyDeviceToHost: return "DeviceToHost";
    case emuMemcpyDeviceToDevice: return "DeviceToDevice";
  }
  return "?";
}

struct CopyPlan {
  bool device_access = false;  // some side is device memory
  bool pageable = false;       // some host side is not (entirely) pinned
  int devices[2] = {-1, -1};   // destination, source device (-1: host)
};

// An injected copy fault for a copy touching device memory (faults.cpp).
emuError_t copy_fault(const char* call, const CopyPlan& plan) {
  if (!plan.device_access || !emu::faults_armed()) return emuSuccess;
  return emu::fault_on_copy(call, plan.devices[0] >= 0 ? plan.devices[0] : plan.devices[1]);
}

// The queue item of a planned copy (run by copy_bytes, inline or on a worker).
Work copy_work(const CopyPlan& plan, void* dst, const void* src, size_t n) {
  Work w{};
  w.kind = WorkKind::kMemcpy;
  w.device_access = plan.device_access;
  std::copy(plan.devices, plan.devices + 2, w.devices);
  w.dst = dst;
  w.src = src;
  w.bytes = n;
  return w;
}

// Checks one side of a copy against what `kind` says it must be.
emuError_t check_side(const char* call, emuMemcpyKind kind, const char* side, const void* p,
                      size_t n, bool want_device, int* device, CopyPlan* plan) {
  if (p == nullptr) {
    return set_error(emuErrorInvalidValue, "%s: %s %s is null", call, kind_name(kind), side);
  }
  *device = emu::device_of_pointer(p);
  if (want_device) {
    if (*device < 0) {
      return set_error(emuErrorInvalidValue, "%s: %s %s %p is not emu device memory", call,
                       kind_name(kind), side, p);
    }
    if (!emu::range_in_arena(*device, p, n)) {
      return set_error(emuErrorInvalidValue,
                       "%s: %s %s range [%p, %p + %zu) runs past the end of emu:%d's memory", call,
                       kind_name(kind), side, p, p, n, *device);
    }
    plan->device_access = true;
  } else {
    if (*device >= 0) {
      return set_error(emuErrorInvalidValue, "%s: %s %s %p is emu device memory (emu:%d), not host memory",
                       call, kind_name(kind), side, p, *device);
    }
    if (!emu::range_is_pinned(p, n)) plan->pageable = true;
  }
  return emuSuccess;
}

emuError_t plan_copy(const char* call, void* dst, const void* src, size_t n, emuMemcpyKind kind,
                     CopyPlan* plan) {
  bool dst_device = false, src_device = false;
  switch (kind) {
    case emuMemcpyHostToHost: break;
    case emuMemcpyHostToDevice: dst_device = true; break;
    case emuMemcpyDeviceToHost: src_device = true; break;
    case emuMemcpyDeviceToDevice: dst_device = src_device = true; break;
    default:
      return set_error(emuErrorInvalidValue, "%s: invalid memcpy kind %d", call,
                       static_cast<int>(kind));
  }
  if (emuError_t err = check_side(call, kind, "destination", dst, n, dst_device, &plan->devices[0], plan)) {
    return err;
  }
  return check_side(call, kind, "source", src, n, src_device, &plan->devices[1], plan);
}

} // namespace

} // namespace emu

// The native runtime's copy calls (plugin.cpp makes them the API).
namespace emu::native {

emuError_t emuMemcpy(void* dst, const void* src, size_t n, emuMemcpyKind kind) {
  EMU_API_ENTER();
  if (n == 0) return emuSuccess;
  CopyPlan plan;
  if (emuError_t err = plan_copy("emuMemcpy", dst, src, n, kind, &plan)) return err;
  if (emuError_t err = copy_fault("emuMemcpy", plan)) return err;
  for (int device : plan.devices) {
    if (device >= 0 && emu::capture_active()) {
      if (emuError_t err = emu::forbid_if_device_capturing("emuMemcpy", device)) return err;
    }
  }
  for (int device : plan.devices) {
    if (device >= 0) emu::synchronize_device("emuMemcpy", device);
  }
  emu::TracedCall traced(emuActivityKindMemcpy, plan.devices[0] >= 0 ? plan.devices[0] : plan.devices[1],
                         /*stream=*/0, kind, n);
  emu::TracedWork traced_work(traced.record());
  copy_bytes(copy_work(plan, dst, src, n), model_applies());
  return emuSuccess;
}

// LITERALINCLUDE START: MEMCPY_ASYNC
emuError_t emuMemcpyAsync(void* dst, const void* src, size_t n, emuMemcpyKind kind,
                          emuStream_t stream) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuMemcpyAsync", stream)) return err;
  if (n == 0) return emuSuccess;
  CopyPlan plan;
  if (emuError_t err = plan_copy("emuMemcpyAsync", dst, src, n, kind, &plan)) return err;
  if (emuError_t err = copy_fault("emuMemcpyAsync", plan)) return err;
  if (plan.pageable && emu::capture_active() && executing_frame(stream) == nullptr) {
    // The graph would read or write the pageable buffer long after this call.
    if (emuError_t err = emu::forbid_if_capturing("emuMemcpyAsync (pageable host memory)", stream)) return err;
  }
  emu::GraphNode node{emu::GraphNode::kMemcpy};
  node.dst = dst;
  node.src = src;
  node.bytes = n;
  node.copy_kind = kind;
  bool captured = false;
  if (emuError_t err = emu::capture_hook("emuMemcpyAsync", stream, node, &captured)) return err;
  Work w = copy_work(plan, dst, src, n);
  emu::TracedCall traced(emuActivityKindMemcpy, stream->device, stream->id, kind, n);
  w.trace = traced.record();
  Submitted submitted;
  // A copy the performance model makes take time goes to the stream's worker
  // even onto an idle stream: the caller must not wait for a modelled bus.
  const bool inline_ok = !emu::g_model.active || plan.pageable || executing_frame(stream) != nullptr;
  if (emuError_t err = submit("emuMemcpyAsync", stream, w, inline_ok, &submitted)) {
    traced.not_queued();
    return err;
  }
  // Pageable memory may be reused by the caller as soon as we return.
  if (plan.pageable && !submitted.ran_inline) wait_until_completed(stream, submitted.seq);
  return emuSuccess;
}
// LITERALINCLUDE END: MEMCPY_ASYNC

} // namespace emu::native
