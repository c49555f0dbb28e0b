// The one path by which device work runs: every kernel (native or fallback)
// is launched onto an emu stream through the runtime.
#pragma once

#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <cstddef>
#include <cstdint>

#include <exception>
#include <functional>
#include <thread>

namespace torch_emu {

// Runs `kernel` as device work in the order of `stream` and waits for it to
// finish: for kernels that produce tensors whose sizes the caller needs, or
// results it reads (queue_kernel below does not wait). While it runs, on
// whatever thread runs it, the current emu device and stream are those of
// `stream`, and host allocations made by CPU kernels come from emu device
// memory. An exception thrown by `kernel` is rethrown here.
// While `stream` captures a graph (EmuGraph.h) this form cannot record the
// kernel and fails, naming `what` (by default the calling function).
void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   const char* what = __builtin_FUNCTION());
// The capturable form: while `stream` captures, `make_replay()` is called once
// for a closure that owns everything the kernel reads and runs it again on
// the same memory, each time the graph is replayed.
void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   c10::function_ref<std::function<void()>()> make_replay,
                   const char* what = __builtin_FUNCTION());

// LITERALINCLUDE START: QUEUE_KERNEL_DECL
// How queue_kernel launches, set once (when the device starts: EmuHooks init):
// - kAdaptive (the default with cores to spare): per kernel, by
//   run_at_once() in EmuLaunch.cpp: a small kernel onto an idle stream runs
//   at once on the calling thread, where a hand-off to the worker would cost
//   more than the kernel; a large one, or any onto a busy stream, is queued,
//   so that the host runs ahead while the device works;
// - kQueued (TORCH_EMU_LAUNCH_QUEUED=1): always queued, as a GPU launch is;
// - kAuto (the default on one core or when a runtime asks for it,
//   TORCH_EMU_LAUNCH_QUEUED=0): queued behind the stream's work when the
//   stream is busy; on an idle stream every kernel runs at once;
// - kBlocking (TORCH_EMU_LAUNCH_BLOCKING=1): every launch waits for its
//   kernel, for debugging, like CUDA_LAUNCH_BLOCKING.
enum class LaunchMode { kAdaptive, kAuto, kQueued, kBlocking };
LaunchMode launch_mode();
// For a runtime whose every call is expensive (the Python bridge): auto
// instead of adaptive when the environment does not say. Before the device starts.
void prefer_auto_launch_mode();

// Launches a kernel whose outputs already exist (a GPU launch): unless it
// runs at once on an idle stream (kAdaptive, kAuto), it is queued and the call returns;
// the stream's worker later runs the closure `make_owning()` returns, which
// owns everything the kernel reads (keep() in aten/kernels/EmuKernel.h).
// While `stream` captures, with blocking launches, or from a kernel running
// on `stream`, it is launch_kernel above instead. An exception a queued kernel
// throws is reported, naming `what`, by the next synchronisation of `stream`.
// `bytes` is what the kernel reads and writes, the measure of its cost
// run_at_once() takes (kUnknownBytes: a kernel worth queueing).
// `rule` kAtOnceWhenIdle: onto an idle stream the kernel runs at once
// whatever its size, for callers that launch kernels back to back (code that
// Inductor generates: CompileBindings.cpp).
constexpr size_t kUnknownBytes = SIZE_MAX;
enum class QueueRule { kByCost, kAtOnceWhenIdle };
void queue_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                  c10::function_ref<std::function<void()>()> make_owning,
                  const char* what = __builtin_FUNCTION(), size_t bytes = kUnknownBytes,
                  QueueRule rule = QueueRule::kByCost);

// While queue_kernel asks for a queued kernel's closure, on this thread: the
// view of emu `storage` the closure should hold, which does not own the
// memory (a GPU kernel does not own its arguments either: the caching
// allocator may reuse a freed block as soon as stream order allows, and
// record_stream is what protects cross-stream use). One view per storage, so
// that arguments sharing memory still share a storage. Only while
// making_queued_kernel(): graphs keep owning what they replay.
c10::Storage queued_view_of(const c10::Storage& storage);
// Whether this thread is making a queued kernel's closure right now.
bool making_queued_kernel();

// Launches since the process started: queued (returned before their kernel
// ran), queueable ones that ran at once on an idle stream, and those that had
// to wait for their kernel (launch_kernel: the fallback, kernels that
// allocate their outputs, random ops). Nested and captured launches are not
// counted. How much of a program can run asynchronously.
struct LaunchCounts {
  uint64_t queued;
  uint64_t at_once;
  uint64_t waited;
};
LaunchCounts launch_counts();
// LITERALINCLUDE END: QUEUE_KERNEL_DECL

// Names the kernels the calling thread launches while it lives (innermost
// wins) in the profiler's device trace; by default a kernel is named after the
// operator that launched it. Costs one relaxed load when no trace records.
class KernelName {
 public:
  explicit KernelName(const char* name);
  ~KernelName();
  KernelName(const KernelName&) = delete;
  KernelName& operator=(const KernelName&) = delete;

 private:
  bool pushed_;
};

} // namespace torch_emu
