// Private plumbing shared by the runtime's translation units. Not part of the
// API: only the emu_runtime*.h headers are. What only the streams' files share
// is in streams_internal.h.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_perf.h"
#include "runtime/emu_runtime_plugin.h"
#include "runtime/emu_runtime_trace.h"
#include "runtime/emu_runtime_tls.h"

// The native runtime's implementation of each call of the runtime table; the
// public emu* names forward to the installed runtime (plugin.cpp).
namespace emu::native {
#define EMU_NATIVE_DECLARATION(name, params, args) emuError_t name params;
EMU_RUNTIME_CALLS(EMU_NATIVE_DECLARATION)
#undef EMU_NATIVE_DECLARATION
int emuStrictMode(void);
} // namespace emu::native

namespace emu {

constexpr size_t kPageSize = 4096;
constexpr int kMaxDevices = 16;

inline size_t round_up_to_page(size_t n) {
  return (n + kPageSize - 1) & ~(kPageSize - 1);
}

// ---- runtime.cpp: configuration, initialisation, errors, devices ------------

struct Config {
  int device_count;  // 1..kMaxDevices
  size_t capacity;   // bytes per device, a multiple of kPageSize
  bool strict;       // TORCH_EMU_STRICT=1
};
// Only meaningful after ensure_init() returned emuSuccess. Never changes after.
extern Config g_config;

enum InitState : int { kUninitialised = 0, kReady = 1, kFailed = 2 };
extern std::atomic<int> g_init_state;
extern std::atomic<bool> g_forked_child;
// Set by an injected emuFaultDeviceLost (faults.cpp); never cleared.
extern std::atomic<bool> g_device_lost;

// `releases`: the call only releases resources (emuFree...), which still
// succeeds once the device is lost, so that programs can tear down.
emuError_t init_slow(const char* call, bool releases = false);

// ---- plugin.cpp: which runtime is installed ---------------------------------

// True once another runtime was installed (emu_runtime_plugin.h): the native
// runtime then never initialises, and its own calls fail.
bool plugged_runtime();

// Called when the process first creates device state (device memory, pinned
// memory, streams). Only such a process poisons its forked children: reading
// the configuration (device count, properties) does not.
void note_device_state_created();

// Every API entry point starts here. The common case (initialised, not a
// forked child) is two relaxed-ish loads; everything else is out of line.
inline emuError_t ensure_init(const char* call, bool releases = false) {
  if (__builtin_expect(g_init_state.load(std::memory_order_acquire) == kReady &&
                           !g_forked_child.load(std::memory_order_relaxed) &&
                           !g_device_lost.load(std::memory_order_relaxed),
                       1)) {
    return emuSuccess;
  }
  return init_slow(call, releases);
}

#define EMU_API_ENTER()                                   \
  do {                                                    \
    const emuError_t emu_init_err_ = ::emu::ensure_init(__func__); \
    if (emu_init_err_ != emuSuccess) return emu_init_err_; \
  } while (0)
// For the calls that release resources (see init_slow).
#define EMU_API_ENTER_RELEASE()                           \
  do {                                                    \
    const emuError_t emu_init_err_ = ::emu::ensure_init(__func__, /*releases=*/true); \
    if (emu_init_err_ != emuSuccess) return emu_init_err_; \
  } while (0)

// Stores the detailed message for this thread and returns `err`, so failing
// paths read `return set_error(emuErrorX, "...", ...);`.
emuError_t set_error(emuError_t err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// emuErrorInvalidDevice (with the standard message) unless 0 <= device < count.
emuError_t check_device(const char* call, int device);
int current_device();

// Human-readable size: "512 bytes", "1.50 GiB".
struct ByteString {
  char text[32];
};
ByteString format_bytes(size_t bytes);

// ---- perf.cpp: the performance model (emu_runtime_perf.h) -------------------

struct PerformanceModel {
  bool active = false;  // any figure set: while false, no stream holds anything
  emuPerformanceModel figures{0, 0, 0, 0, 0, 1.0};
};
extern PerformanceModel g_model;  // set at init, then read-only

// TORCH_EMU_PROFILE's text -> figures, or false with *error saying why.
bool parse_performance_model(const char* text, emuPerformanceModel* out, std::string* error);
void set_performance_model(const emuPerformanceModel& model);
// Hold the calling thread, which runs the work of a stream: until a copy of
// `bytes` to `dst_device` from `src_device` (-1: host memory), started at
// `start`, has taken its modelled time; for the launch latency; until a
// kernel started at `start` has taken its slowed-down time.
void hold_copy(std::chrono::steady_clock::time_point start, int dst_device, int src_device, size_t bytes);
void hold_launch_latency();
void hold_kernel(std::chrono::steady_clock::time_point start);

// ---- faults.cpp: injected faults (emu_runtime_faults.h) ---------------------

// Faults armed: while 0, every hook below costs the caller one relaxed load.
extern std::atomic<int> g_armed_faults;
inline bool faults_armed() {
  return g_armed_faults.load(std::memory_order_relaxed) != 0;
}
// emuMalloc of `size` bytes on `device`, which has `allocated` bytes taken:
// emuErrorMemoryAllocation (with its message) if a fault fires.
emuError_t fault_on_malloc(int device, size_t size, size_t allocated);
// Which fault fails a launched kernel (fault_id 0: none), carried with it.
struct InjectedFailure {
  int fault_id = 0;
  uint64_t launch = 0;  // the launch's number among those the fault matched
};
// A kernel launch on `device`: emuErrorDeviceLost if the device is lost now;
// else fills *failure if the kernel is to fail.
emuError_t fault_on_launch(const char* call, int device, InjectedFailure* failure);
std::string injected_failure_message(const InjectedFailure& failure, int device);
// A copy touching `device`: emuErrorEccUncorrectable if a fault fires.
emuError_t fault_on_copy(const char* call, int device);
const char* device_lost_reason();
// The calling thread's launch name (emuFaultSetLaunchName), or null: a
// captured kernel keeps it, and its replays are launched under it.
const char* launch_name();

// ---- memory.cpp: arenas, pinned memory, strict mode -------------------------

// Index of the device whose arena contains `p`, or -1. Lock-free (and
// async-signal-safe): it only reads the published arena bases.
int device_of_pointer(const void* p);
// True when [p, p + n) lies inside device `device`'s arena.
bool range_in_arena(int device, const void* p, size_t n);
// True when [p, p + n) lies inside one emuMallocHost allocation.
bool range_is_pinned(const void* p, size_t n);

// Installs the strict-mode SIGSEGV handler (called once, at init).
void install_strict_handler();

// Brackets "device work" (kernels, the runtime's device-memory copies): in
// strict mode the arenas are accessible only while at least one is in flight.
void device_work_begin();
void device_work_end();

class DeviceWorkScope {
 public:
  explicit DeviceWorkScope(bool active = true) : active_(active && g_config.strict) {
    if (active_) device_work_begin();
  }
  ~DeviceWorkScope() {
    if (active_) device_work_end();
  }
  DeviceWorkScope(const DeviceWorkScope&) = delete;
  DeviceWorkScope& operator=(const DeviceWorkScope&) = delete;

 private:
  bool active_;
};

// ---- stats.cpp: busy time behind emuDeviceGetUtilizationRates ---------------

// Brackets activity on `device`: a kernel (counts as kernel and memory time) or
// a copy that reads or writes the device's memory (memory time).
void activity_begin(int device, bool kernel);
void activity_end(int device, bool kernel);

class ActivityScope {
 public:
  ActivityScope(int device, bool kernel) : device_(device), kernel_(kernel) {
    if (device_ >= 0) activity_begin(device_, kernel_);
  }
  ~ActivityScope() {
    if (device_ >= 0) activity_end(device_, kernel_);
  }
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  int device_;
  bool kernel_;
};

// Sharing device memory with other processes (ipc.cpp). The arena's memory
// file, mapping the arena first if needed.
emuError_t arena_file(int device, int* fd);
// The emuMalloc allocation containing `p`: device, start, offset in the
// arena's file, size.
bool find_allocation(const void* p, int* device, void** start, size_t* offset, size_t* size);
// Maps `size` bytes of another process's memory file `fd` at `file_offset`
// into a free range of `device`'s arena; the range counts as allocated.
emuError_t arena_map_foreign(int device, int fd, size_t file_offset, size_t size, void** ptr);
// Undoes arena_map_foreign; emuErrorInvalidDevicePointer (no message) if
// `ptr` is not the start of such a range.
emuError_t arena_unmap_foreign(void* ptr);

// ---- streams.cpp ------------------------------------------------------------

// Waits for every stream created on `device`, except for the work the calling
// thread is itself executing (so kernels may synchronise without deadlock).
emuError_t synchronize_device(const char* call, int device);
// Waits for all work queued on the device's streams, unless the calling thread
// is running work itself (then it returns at once: waiting there could wait
// for work that waits for the caller). What emuFree does before it frees.
void wait_for_device_outside_work(int device);

// ---- trace.cpp: activity records (emu_runtime_trace.h) ----------------------

// A record in the making: it is complete once both the submitting call has
// returned and the work has run, in either order.
struct TraceRecord;
extern std::atomic<bool> g_trace_enabled;

// On the submitting thread, when tracing is enabled: starts a record.
TraceRecord* trace_submit(emuActivityKind kind, int device, uint64_t stream,
                          emuMemcpyKind copy_kind, size_t bytes);
// The submitting call returns; `queued` false: the work will never run.
void trace_submitted(TraceRecord* record, bool queued);
void trace_work_begin(TraceRecord* record);
void trace_work_end(TraceRecord* record);

// Brackets a submitting API call: a record only while tracing is enabled (the
// one relaxed load a submission costs when it is not).
class TracedCall {
 public:
  TracedCall(emuActivityKind kind, int device, uint64_t stream, emuMemcpyKind copy_kind = emuMemcpyHostToHost,
             size_t bytes = 0)
      : record_(g_trace_enabled.load(std::memory_order_relaxed)
                    ? trace_submit(kind, device, stream, copy_kind, bytes)
                    : nullptr) {}
  ~TracedCall() {
    if (record_ != nullptr) trace_submitted(record_, queued_);
  }
  TraceRecord* record() const { return record_; }
  void not_queued() { queued_ = false; }
  TracedCall(const TracedCall&) = delete;
  TracedCall& operator=(const TracedCall&) = delete;

 private:
  TraceRecord* record_;
  bool queued_ = true;
};

// Brackets the execution of traced work (no-op for untraced work).
class TracedWork {
 public:
  explicit TracedWork(TraceRecord* record) : record_(record) {
    if (record_ != nullptr) trace_work_begin(record_);
  }
  ~TracedWork() {
    if (record_ != nullptr) trace_work_end(record_);
  }
  TracedWork(const TracedWork&) = delete;
  TracedWork& operator=(const TracedWork&) = delete;

 private:
  TraceRecord* record_;
};

// ---- graphs.cpp: stream capture (emu_runtime_graphs.h) ----------------------

// Captures in progress, on any device: while 0, the capture hooks of the
// streams' files cost one relaxed load.
extern std::atomic<int> g_active_captures;
inline bool capture_active() {
  return g_active_captures.load(std::memory_order_relaxed) != 0;
}

// One piece of recorded work.
struct GraphNode {
  enum Kind : uint8_t { kKernel, kMemcpy, kHostFunc, kEventRecord, kEventWait } kind;
  emuKernelFn_t kernel_fn = nullptr;
  emuHostFn_t host_fn = nullptr;
  void* user_data = nullptr;
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  emuMemcpyKind copy_kind = emuMemcpyDeviceToDevice;
  emuEvent_t event = nullptr;  // a reference is held by the graph
  std::string launch_name{};   // kKernel: launch_name() when captured ("": none)
};

// Called by streams.cpp for work submitted to `stream` from outside work
// running on it: records `node` if `stream` captures (*captured = true).
emuError_t capture_node(const char* call, emuStream_t stream, const GraphNode& node, bool* captured);
// Fail with emuErrorStreamCaptureUnsupported, and invalidate the capture, if
// the call would wait for a capturing stream.
emuError_t forbid_if_capturing(const char* call, emuStream_t stream);
emuError_t forbid_if_device_capturing(const char* call, int device);
emuError_t forbid_if_event_captured(const char* call, emuEvent_t event);

// events.cpp and streams.cpp, for graphs.cpp.
void retain_event(emuEvent_t event);
void release_event(emuEvent_t event);
int stream_device(emuStream_t stream);

// memory.cpp: the contents of a device's live allocations, taken when
// a capture begins and put back when it ends.
struct MemorySnapshot {
  std::vector<std::pair<size_t, size_t>> ranges;  // (offset, size) of live allocations
  std::vector<char> bytes;
};
void snapshot_device_memory(int device, MemorySnapshot* snapshot);
void restore_device_memory(int device, const MemorySnapshot& snapshot);

} // namespace emu
