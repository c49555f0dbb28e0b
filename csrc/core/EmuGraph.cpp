// Graph capture and replay: at::GraphImplInterface for emu (what
// torch.accelerator.Graph and torch.emu.EmuGraph drive), on the runtime's
// stream capture (emu_runtime_graphs.h).
//
// A captured kernel must run again at every replay, long after the C++ frames
// that launched it are gone, on the same memory. So each capturable launch
// hands over a closure that owns what the kernel reads (EmuLaunch.h), and the
// memory the kernel allocated while it was captured is handed to it again, in
// the same order, when it replays (KernelBlocksScope, EmuKernelAllocator.h).

#include "core/EmuGraph.h"

#include <ATen/core/GraphImplInterface.h>
#include <ATen/core/Generator.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceGuard.h>

#include <array>
#include <cstring>
#include <atomic>
#include <fstream>
#include <thread>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/EmuDeviceAllocator.h"
#include "core/EmuException.h"
#include "core/EmuGenerator.h"
#include "core/EmuKernelAllocator.h"
#include "core/EmuKernelContext.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_faults.h"
#include "runtime/emu_runtime_graphs.h"

namespace torch_emu {
namespace {

constexpr int kMaxDevices = 16;

// ---- captures in progress ---------------------------------------------------

std::atomic<int> g_captures{0};

struct CapturedKernel;

struct DeviceCapture {
  c10::StreamId stream = -1; // -1: not capturing
  std::string invalid; // why the capture can no longer succeed ("" if it can)
  std::vector<CapturedKernel*>* kernels = nullptr; // the graph's, in capture order
};
std::mutex g_capture_mu;
std::array<DeviceCapture, kMaxDevices> g_capture; // guarded by g_capture_mu

// Under g_capture_mu.
void check_not_capturing_locked(c10::DeviceIndex device) {
  if (g_capture[device].stream >= 0) {
    throw c10::AcceleratorError({__func__, __FILE__, __LINE__}, emuErrorStreamCaptureUnsupported,
                                c10::str("emu:", static_cast<int>(device),
                                         " is capturing another graph already (one capture per device at a time)"));
  }
}

void invalidate(c10::DeviceIndex device, const std::string& why) {
  std::lock_guard<std::mutex> lock(g_capture_mu);
  if (g_capture[device].invalid.empty()) {
    g_capture[device].invalid = why;
  }
}


// ---- captured kernels ---------------------------------------------------------

// LITERALINCLUDE START: CAPTURED_KERNEL
// The user_data of a captured launch, owned by the runtime's graph. Its first
// run is the kernel itself, during capture (the caller needs the results);
// every later run is a replay.
struct CapturedKernel {
  c10::Stream stream;
  std::thread::id launcher;
  std::string what;
  std::function<void()> replay;
  c10::function_ref<void()> kernel; // valid during the first run only
  // Grad mode, dispatch keys... as when captured: CPU code that calls other
  // ops (foreach, composite kernels) dispatches the same way at replay.
  at::ThreadLocalState state;
  bool captured = false;
  // The blocks the kernel allocated in its first run, in order.
  KernelBlocks allocations;
  std::exception_ptr error;
};

int run_captured(void* user_data) {
  auto* k = static_cast<CapturedKernel*>(user_data);
  k->error = run_as_kernel(k->stream, k->launcher, [k] {
    if (!k->captured) {
      k->captured = true;
      const KernelBlocksScope record(k->allocations, KernelBlocksScope::kRecord);
      k->kernel();
    } else {
      const at::ThreadLocalStateGuard state(k->state);
      const KernelBlocksScope replay(k->allocations, KernelBlocksScope::kReplay);
      k->replay();
    }
  });
  return k->error ? 1 : 0;
}
// LITERALINCLUDE END: CAPTURED_KERNEL

void destroy_captured(void* user_data) {
  delete static_cast<CapturedKernel*>(user_data);
}

} // namespace

bool capture_in_progress() {
  return g_captures.load(std::memory_order_relaxed) != 0;
}

bool is_capturing(const c10::Stream& stream) {
  if (!capture_in_progress()) {
    return false;
  }
  std::lock_guard<std::mutex> lock(g_capture_mu);
  return g_capture[stream.device_index()].stream == stream.id();
}

void check_not_capturing(const char* operation) {
  if (!capture_in_progress()) {
    return;
  }
  const c10::Stream stream = current_stream();
  if (!is_capturing(stream)) {
    return;
  }
  const std::string why = c10::str(operation, " waits for the device, which is not allowed while "
                                   "emu:", static_cast<int>(stream.device_index()),
                                   " captures a graph (the captured work has not run yet)");
  invalidate(stream.device_index(), why);
  TORCH_CHECK(false, why, "; the capture is invalidated");
}

void check_no_capture(c10::DeviceIndex device) {
  check_device_index(device);
  std::lock_guard<std::mutex> lock(g_capture_mu);
  check_not_capturing_locked(device);
}


// LITERALINCLUDE START: LAUNCH_CAPTURED
void launch_captured(const c10::Stream& stream, c10::function_ref<void()> kernel,
                     c10::function_ref<std::function<void()>()>* make_replay, const char* what) {
  if (make_replay == nullptr) {
    const std::string why = c10::str("'", what, "' launched a kernel that cannot be captured into an emu graph");
    invalidate(stream.device_index(), why);
    TORCH_CHECK_NOT_IMPLEMENTED(false, why, " (it has no replayable form); the capture is invalidated. "
                                "Run it outside the captured region.");
  }
  auto* k = new CapturedKernel{stream, launching_thread(), what, (*make_replay)(), kernel, at::ThreadLocalState()};
  k->allocations.device = stream.device_index();
  emuStream_t native = native_stream(stream);
  // Named even with no fault armed: the graph keeps the name, for a fault
  // armed before a replay (the runtime replays each kernel under its name).
  (void)emuFaultSetLaunchName(what);
  const emuError_t attached = emuStreamAttachToCapture(native, k, &destroy_captured);
  if (attached != emuSuccess) {
    delete k;
    EMU_CHECK(attached);
  }
  {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    g_capture[stream.device_index()].kernels->push_back(k);
  }
  // Recorded and run once, inline: no wait (waiting on a capturing stream is
  // not allowed, and there is nothing to wait for).
  const emuError_t launched = emuLaunchKernel(native, &run_captured, k);
  if (k->error) {
    std::rethrow_exception(k->error);
  }
  EMU_CHECK(launched);
}
// LITERALINCLUDE END: LAUNCH_CAPTURED

namespace {

// LITERALINCLUDE START: GRAPH_IMPL
class EmuGraphImpl final : public at::GraphImplInterface {
 public:
  explicit EmuGraphImpl(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~EmuGraphImpl() override {
    reset();
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode /*mode: all checks apply*/) override {
    TORCH_CHECK(graph_ == nullptr && !capturing_,
                "This EmuGraph has already captured a graph; call reset() before capturing again.");
    const c10::Stream stream = current_stream();
    TORCH_CHECK(stream.id() != 0,
                "Emu graphs must be captured on a side stream, not on the default stream of emu:",
                static_cast<int>(stream.device_index()),
                " (as on CUDA): capture under `with torch.emu.stream(torch.emu.Stream()):`, or use "
                "torch.emu.graph(...), which does that for you.");
    const c10::DeviceIndex device = stream.device_index();
    // The kernels run once while captured: draws they make from the default
    // generator must not show, as on a device where capture runs nothing.
    generator_ = default_generator(device);
    generator_state_ = generator_.get_state();
    {
      std::lock_guard<std::mutex> lock(g_capture_mu);
      check_not_capturing_locked(device);
      g_capture[device] = DeviceCapture{stream.id(), "", &kernels_};
    }
    g_captures.fetch_add(1);
    // LITERALINCLUDE START: GRAPH_POOL
    // Everything allocated on the capturing stream comes from a private pool
    // (the caching allocator's, as on CUDA): replays write that memory, so
    // nothing outside the graph (and the graphs sharing its pool) may get it
    // until the graph is reset.
    pool_ = pool.first == 0 && pool.second == 0 ? EmuDeviceAllocator::graph_pool_handle(/*is_user_created=*/false)
                                                : pool;
    device_allocator()->beginAllocateToPool(device, pool_, [stream](c10::Stream s) { return s == stream; });
    // LITERALINCLUDE END: GRAPH_POOL
    const emuError_t begun = emuStreamBeginCapture(native_stream(stream));
    if (begun != emuSuccess) {
      stop_capture(device);
      device_allocator()->endAllocateToPool(device, pool_);
      device_allocator()->releasePool(device, pool_);
      EMU_CHECK(begun);
    }
    stream_ = stream;
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "capture_end() without capture_begin()");
    capturing_ = false;
    const c10::DeviceIndex device = stream_->device_index();
    const std::string invalid = stop_capture(device);
    device_allocator()->endAllocateToPool(device, pool_);
    emuGraph_t graph = nullptr;
    const emuError_t ended = emuStreamEndCapture(native_stream(*stream_), &graph);
    generator_.set_state(generator_state_);
    if (ended != emuSuccess || !invalid.empty()) {
      if (graph != nullptr) {
        (void)emuGraphDestroy(graph);
      }
      kernels_.clear();
      device_allocator()->releasePool(device, pool_);
      TORCH_CHECK(invalid.empty(), "Emu graph capture failed: ", invalid);
      EMU_CHECK(ended);
    }
    graph_ = graph;
    if (!keep_graph_) {
      instantiate();
    }
  }

  void instantiate() override {
    TORCH_CHECK(graph_ != nullptr, "instantiate() needs a captured graph");
    instantiated_ = true; // the recorded graph is what replays: nothing to build
  }

  void replay() override {
    TORCH_CHECK(graph_ != nullptr, "replay() needs a captured graph: capture one first");
    if (!instantiated_) {
      instantiate();
    }
    const c10::DeviceGuard guard(stream_->device());
    const emuError_t launched = emuGraphLaunch(graph_, native_stream(current_stream(stream_->device_index())));
    // A kernel that failed inline: rethrow its own exception.
    for (CapturedKernel* k : kernels_) {
      if (k->error) {
        std::exception_ptr error = std::exchange(k->error, nullptr);
        try {
          std::rethrow_exception(error);
        } catch (const c10::Error& e) {
          TORCH_CHECK(false, "replaying the kernel of '", k->what, "' failed: ", e.what_without_backtrace());
        }
      }
    }
    EMU_CHECK(launched);
  }

  void reset() override {
    if (graph_ != nullptr) {
      (void)emuGraphDestroy(graph_);
      graph_ = nullptr;
      device_allocator()->releasePool(stream_->device_index(), pool_);
    }
    kernels_.clear();
    instantiated_ = false;
  }

  c10::MempoolId_t pool() const override {
    return pool_;
  }

  void enable_debug_mode() override {
    debug_ = true;
  }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "debug_dump() needs enable_debug_mode() before the capture");
    TORCH_CHECK(graph_ != nullptr, "debug_dump() needs a captured graph");
    std::ofstream out(path);
    TORCH_CHECK(out, "debug_dump: cannot write ", path);
    size_t count = 0;
    EMU_CHECK(emuGraphGetNodeCount(graph_, &count));
    size_t kernel = 0;
    for (size_t i = 0; i < count; ++i) {
      char text[160];
      EMU_CHECK(emuGraphDescribeNode(graph_, i, text, sizeof(text)));
      out << i << ": " << text;
      if (std::strncmp(text, "kernel", 6) == 0 && kernel < kernels_.size()) {
        const CapturedKernel* k = kernels_[kernel++];
        out << " " << k->what << " (" << k->allocations.blocks.size() << " allocations)";
      }
      out << "\n";
    }
  }

 private:
  // Ends the core's side of the capture; returns why it failed ("" if not).
  static std::string stop_capture(c10::DeviceIndex device) {
    std::lock_guard<std::mutex> lock(g_capture_mu);
    std::string invalid = std::move(g_capture[device].invalid);
    g_capture[device] = DeviceCapture{};
    g_captures.fetch_sub(1);
    return invalid;
  }

  const bool keep_graph_;
  bool capturing_ = false;
  bool instantiated_ = false;
  bool debug_ = false;
  std::optional<c10::Stream> stream_;
  std::vector<CapturedKernel*> kernels_; // owned by graph_ (emuStreamAttachToCapture)
  c10::MempoolId_t pool_{0, 0};
  emuGraph_t graph_ = nullptr;
  at::Generator generator_;
  at::Tensor generator_state_;
};
// LITERALINCLUDE END: GRAPH_IMPL

} // namespace

} // namespace torch_emu

// LITERALINCLUDE START: REGISTER_GRAPH_IMPL
// The registry is looked up with c10::DeviceTypeName(PrivateUse1, false) when
// a graph is created, i.e. after torch_emu renamed PrivateUse1: "EMU". (At
// static-initialisation time the same call still says "PRIVATEUSEONE".)
namespace at {
REGISTER_GRAPH_IMPL(EMU, torch_emu::EmuGraphImpl);
} // namespace at
// LITERALINCLUDE END: REGISTER_GRAPH_IMPL
