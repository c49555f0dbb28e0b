#include "core/EmuLaunch.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/EmuException.h"
#include "core/EmuGraph.h"
#include "core/EmuKernelContext.h"
#include "core/EmuStream.h"
#include "runtime/emu_runtime_env.h"
#include "runtime/emu_runtime_faults.h"
#include "runtime/emu_runtime_tls.h"
#include "runtime/emu_runtime_trace.h"

namespace torch_emu {
namespace {

std::atomic<uint64_t> g_waited_launches{0};
std::atomic<uint64_t> g_at_once_launches{0};

// LITERALINCLUDE START: WORKER_TEAM
// From torch's OpenMP runtime and MKL, which are loaded with libtorch_cpu
// (weak: a build of torch without them has neither). MKL keeps a thread
// count of its own, set for every thread by torch.set_num_threads; the
// _Local form sets it for the calling thread (0: the global one again).
extern "C" void omp_set_num_threads(int) __attribute__((weak));
extern "C" int omp_get_max_threads() __attribute__((weak));
extern "C" int MKL_Set_Num_Threads_Local(int) __attribute__((weak));

// Sets the OpenMP team of this thread's parallel regions, and MKL's; returns
// MKL's previous setting for this thread.
int set_team(int threads) {
  if (omp_set_num_threads != nullptr) {
    omp_set_num_threads(threads);
  }
  return MKL_Set_Num_Threads_Local != nullptr ? MKL_Set_Num_Threads_Local(threads) : 0;
}

// A stream worker runs kernels while the host thread runs Python: its OpenMP
// team gets the cores the host leaves free, at least one (on two cores, one
// thread and no team, whose spinning would slow the host down). Per thread,
// once: OpenMP's thread count is a per-thread setting.
void size_worker_team() {
  thread_local const bool sized = [] {
    (void)set_team(std::max(1, at::get_num_threads() - 1));
    return true;
  }();
  (void)sized;
}

// Up to this many bytes read and written a kernel is small: it runs faster at
// once than queued (run_at_once below). A binary op on two 64x64 float
// tensors (48 KiB), `where` (52 KiB) and `cat` of two (64 KiB) are small.
constexpr size_t kSmallKernelBytes = 64 << 10;

// Below this many a kernel the host thread runs (at once, or queued work of a
// stream it waits for) runs alone, without the thread's OpenMP team. Once a
// team's work is done, its threads spin for milliseconds before they sleep
// (libgomp's default), on the core the stream worker needs; and CPU code
// starts teams for little work (log_softmax, nll_loss's backward, MKL's
// matrix products). A host thread that ran such kernels with its team left
// the worker a fraction of a core: the demo's step took 1.2-1.5x CPU's,
// 0.8-0.95x after. The line is measured (benchmarks/bench_async.py and the
// demo, two cores): from 512 KiB a kernel gains more from the team than the
// spinning costs (a transformer block's matrix products: 1.3x CPU's step
// when they ran alone, 0.9x with the team); at 128 KiB the demo and the
// Hugging Face models stayed at 1.1-1.2x, and at 2 MiB the transformer block
// went to 1.4x.
constexpr size_t kTeamKernelBytes = 512 << 10;

class HostTeam {
 public:
  explicit HostTeam(size_t bytes) {
    if (bytes < kTeamKernelBytes && omp_get_max_threads != nullptr) {
      if (const int threads = omp_get_max_threads(); threads > 1) {
        threads_ = threads;
        mkl_threads_ = set_team(1);
      }
    }
  }
  ~HostTeam() {
    if (threads_ > 0) {
      if (omp_set_num_threads != nullptr) {
        omp_set_num_threads(threads_);
      }
      if (MKL_Set_Num_Threads_Local != nullptr) {
        (void)MKL_Set_Num_Threads_Local(mkl_threads_);
      }
    }
  }
  HostTeam(const HostTeam&) = delete;
  HostTeam& operator=(const HostTeam&) = delete;

 private:
  int threads_ = 0; // 0: unchanged
  int mkl_threads_ = 0;
};
// LITERALINCLUDE END: WORKER_TEAM

// LITERALINCLUDE START: LAUNCHER_STATE
// How the launching thread dispatches (its dispatch key set: below autograd,
// inference mode...; its grad mode). A kernel that runs on the stream's worker
// runs with it, so that CPU code calling other ops dispatches as it would
// have on the launching thread (not through autograd, for one).
struct LauncherState {
  c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();
  bool grad_mode = c10::GradMode::is_enabled();
  std::thread::id thread = launching_thread();
};

std::exception_ptr run_as_kernel_of(const c10::Stream& stream, const LauncherState& launcher,
                                    c10::function_ref<void()> body, size_t bytes) {
  const bool on_launcher = launcher.thread == std::this_thread::get_id();
  if (!on_launcher) {
    size_worker_team();
  }
  const HostTeam team(on_launcher ? bytes : kUnknownBytes);
  const c10::impl::ForceDispatchKeyGuard keys(launcher.keys);
  const c10::AutoGradMode grad_mode(launcher.grad_mode);
  return run_as_kernel(stream, launcher.thread, body);
}
// LITERALINCLUDE END: LAUNCHER_STATE

// LITERALINCLUDE START: KERNEL_WARNINGS
// A warning (TORCH_WARN) goes to the handler of the thread that raises it, and
// only the launching thread has Python's, which gives a warning the line of
// the Python call that caused it. A kernel that runs on another thread (the
// stream's worker, a thread waiting for the stream) keeps its warnings here
// instead; a launch that waits raises them on the launching thread once its
// kernel is done, so Python sees each once, from the line of the call.
struct KeptWarnings final : c10::WarningHandler {
  void process(const c10::Warning& warning) override {
    warnings.push_back(warning);
  }
  std::vector<c10::Warning> warnings;
};

// Runs the kernel as run_as_kernel_of does, its warnings kept in `warnings`.
std::exception_ptr run_keeping_warnings(const c10::Stream& stream, const LauncherState& launcher,
                                        c10::function_ref<void()> body, size_t bytes,
                                        std::vector<c10::Warning>& warnings) {
  KeptWarnings kept;
  const c10::WarningUtils::WarningHandlerGuard handler(&kept);
  std::exception_ptr error = run_as_kernel_of(stream, launcher, body, bytes);
  warnings = std::move(kept.warnings);
  return error;
}

void raise_on_this_thread(const std::vector<c10::Warning>& warnings) {
  for (const c10::Warning& warning : warnings) {
    c10::warn(warning);
  }
}

// A queued kernel's launch has returned before it runs: its warnings are
// raised by the host's next launch, from the line of that call.
std::mutex g_queued_warnings_mutex;
std::vector<c10::Warning> g_queued_warnings;
std::atomic<bool> g_have_queued_warnings{false};

void keep_queued_warnings(std::vector<c10::Warning>&& warnings) {
  const std::lock_guard<std::mutex> lock(g_queued_warnings_mutex);
  g_queued_warnings.insert(g_queued_warnings.end(), std::make_move_iterator(warnings.begin()),
                           std::make_move_iterator(warnings.end()));
  g_have_queued_warnings.store(true, std::memory_order_release);
}

void raise_queued_warnings() {
  if (C10_LIKELY(!g_have_queued_warnings.load(std::memory_order_acquire))) {
    return;
  }
  std::vector<c10::Warning> warnings;
  {
    const std::lock_guard<std::mutex> lock(g_queued_warnings_mutex);
    warnings.swap(g_queued_warnings);
    g_have_queued_warnings.store(false, std::memory_order_relaxed);
  }
  raise_on_this_thread(warnings);
}
// LITERALINCLUDE END: KERNEL_WARNINGS

struct Launch {
  c10::function_ref<void()> kernel;
  c10::Stream stream;
  size_t bytes; // what the kernel reads and writes (kUnknownBytes: not known)
  std::exception_ptr error;
  LauncherState launcher;
  std::vector<c10::Warning> warnings; // raised on another thread than the launcher
  bool ran_on_launcher = false; // then it ran inside the launch call, and is done
};

// Runs on the launching thread (stream idle, or helping the stream while it
// waits) or on the stream's worker. The launching thread dispatches as it did
// at the launch (it has been inside the launch since), so it needs no
// LauncherState guards; a queued kernel's launcher may have moved on.
int run_kernel(void* user_data) {
  auto* launch = static_cast<Launch*>(user_data);
  if (launch->launcher.thread == std::this_thread::get_id()) {
    launch->ran_on_launcher = true;
    const HostTeam team(launch->bytes);
    launch->error = run_as_kernel(launch->stream, launch->launcher.thread, launch->kernel);
  } else {
    launch->error =
        run_keeping_warnings(launch->stream, launch->launcher, launch->kernel, launch->bytes, launch->warnings);
  }
  return launch->error ? 1 : 0;
}

} // namespace

// LITERALINCLUDE START: LAUNCH_KERNEL
namespace {

// While faults are armed, launches carry their kernel's name, so that a fault
// can fail the kernels of one op (emu_runtime_faults.h).
void name_launch_for_faults(const char* what) {
  if (C10_UNLIKELY(emuFaultsArmed() != 0)) {
    (void)emuFaultSetLaunchName(what);
  }
}

// Submits `kernel` and waits for it. Waiting also makes the kernel's results
// (and errors) visible here. A launch failure is our own kernel's exception,
// rethrown with its type. A kernel the runtime ran inside the launch call, on
// this thread (an idle stream), is done when the call returns: there is
// nothing to wait for, and an earlier queued kernel's failure is left to the
// stream's next synchronisation, as any launch that does not wait leaves it.
void run_and_wait(const c10::Stream& stream, emuStream_t native, c10::function_ref<void()> kernel,
                  const char* what, size_t bytes) {
  name_launch_for_faults(what);
  raise_queued_warnings();
  Launch launch{kernel, stream, bytes, nullptr, {}, {}};
  const emuError_t launched = emuLaunchKernel(native, &run_kernel, &launch);
  const emuError_t synced = launch.ran_on_launcher ? emuSuccess : emuStreamSynchronize(native);
  raise_on_this_thread(launch.warnings);
  if (launch.error) {
    std::rethrow_exception(launch.error);
  }
  EMU_CHECK(launched);
  EMU_CHECK(synced);
}

} // namespace

void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                   c10::function_ref<std::function<void()>()> make_replay, const char* what) {
  if (!inside_kernel_on(stream) && C10_UNLIKELY(capture_in_progress()) && is_capturing(stream)) {
    launch_captured(stream, kernel, &make_replay, what);
    return;
  }
  launch_kernel(stream, kernel, what);
}

void launch_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel, const char* what) {
  if (inside_kernel_on(stream)) {
    kernel();
    return;
  }
  if (C10_UNLIKELY(capture_in_progress()) && is_capturing(stream)) {
    launch_captured(stream, kernel, nullptr, what);
    return;
  }
  g_waited_launches.fetch_add(1, std::memory_order_relaxed);
  run_and_wait(stream, native_stream(stream), kernel, what, kUnknownBytes);
}
// LITERALINCLUDE END: LAUNCH_KERNEL

// LITERALINCLUDE START: QUEUE_KERNEL
namespace {

struct QueuedKernel {
  std::function<void()> body;
  c10::Stream stream;
  LauncherState launcher;
  const char* what;
  size_t bytes;
  uint64_t order; // its place in launch order
  QueuedKernel* next_finished = nullptr;
};
// LITERALINCLUDE END: QUEUE_KERNEL

// LITERALINCLUDE START: FINISHED_KERNELS
// Finished kernels are deleted by the next launch, on a launching thread, not
// by the worker: memory one thread allocates and another frees makes glibc's
// malloc lock the allocating thread's arena on both threads, once per kernel,
// and they then sleep on that lock in turn. What a kernel keeps owns no device
// memory (queued_view_of), so deleting it later keeps none alive.
std::atomic<QueuedKernel*> g_finished{nullptr};

void retire(QueuedKernel* job) {
  job->next_finished = g_finished.load(std::memory_order_relaxed);
  while (!g_finished.compare_exchange_weak(job->next_finished, job, std::memory_order_release,
                                           std::memory_order_relaxed)) {
  }
}

void delete_finished() {
  if (g_finished.load(std::memory_order_relaxed) == nullptr) {
    return;
  }
  QueuedKernel* job = g_finished.exchange(nullptr, std::memory_order_acquire);
  while (job != nullptr) {
    std::unique_ptr<QueuedKernel> done(job);
    job = job->next_finished;
  }
}
// LITERALINCLUDE END: FINISHED_KERNELS

// LITERALINCLUDE START: RUN_QUEUED
// Runs on the stream's worker, or on a thread waiting for the stream. Nobody
// is there to catch an exception: its text goes to the runtime, which reports
// it at the stream's next sync.
int run_queued(void* data) {
  auto* job = static_cast<QueuedKernel*>(data);
  std::exception_ptr error;
  {
    const RunningQueuedKernel running(job->order);
    std::vector<c10::Warning> warnings;
    error = run_keeping_warnings(job->stream, job->launcher, job->body, job->bytes, warnings);
    if (C10_UNLIKELY(!warnings.empty())) {
      keep_queued_warnings(std::move(warnings));
    }
  }
  const char* what = job->what;
  retire(job);
  if (!error) {
    return 0;
  }
  std::string message = std::string(what) + ": ";
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    message += e.what_without_backtrace();
  } catch (const std::exception& e) {
    message += e.what();
  } catch (...) {
    message += "unknown exception";
  }
  message += " (kernels run asynchronously, so this was reported at a later call; "
             "TORCH_EMU_LAUNCH_BLOCKING=1 reports it where the op is called)";
  (void)emuKernelSetErrorMessage(message.c_str());
  return 1;
}
// LITERALINCLUDE END: RUN_QUEUED

// The unowned views handed out while one queued kernel's closure is made
// (queued_view_of), for as long as it lives.
struct QueueViews {
  QueueViews() { tls_current = this; }
  ~QueueViews() { tls_current = nullptr; }
  QueueViews(const QueueViews&) = delete;
  QueueViews& operator=(const QueueViews&) = delete;

  c10::SmallVector<std::pair<const c10::StorageImpl*, c10::Storage>, 4> views;
  static EMU_HOT_TLS thread_local QueueViews* tls_current;
};
EMU_HOT_TLS thread_local QueueViews* QueueViews::tls_current = nullptr;

bool stream_busy(emuStream_t stream) {
  int pending = 1;
  EMU_CHECK(emuStreamGetPendingWork(stream, &pending));
  return pending != 0;
}

} // namespace

// LITERALINCLUDE START: LAUNCH_MODE
std::atomic<bool> g_prefer_auto{false};

LaunchMode launch_mode() {
  // A bad value throws (first at the device's start: EmuHooks init), and the
  // next call reads the variables again.
  static const LaunchMode mode = [] {
    const std::optional<bool> blocking = env_bool("TORCH_EMU_LAUNCH_BLOCKING");
    const std::optional<bool> queued = env_bool("TORCH_EMU_LAUNCH_QUEUED");
    if (blocking.value_or(false)) {
      return LaunchMode::kBlocking;
    }
    if (queued.has_value()) {
      return *queued ? LaunchMode::kQueued : LaunchMode::kAuto;
    }
    // Queued kernels overlap with the host only on a core it leaves free.
    const bool spare_cores = usable_cores() > 1;
    return spare_cores && !g_prefer_auto.load() ? LaunchMode::kAdaptive : LaunchMode::kAuto;
  }();
  return mode;
}
// LITERALINCLUDE END: LAUNCH_MODE

void prefer_auto_launch_mode() {
  g_prefer_auto.store(true);
}

// LITERALINCLUDE START: RUN_AT_ONCE
// The rule of the default launch mode, for a kernel onto a stream with
// nothing queued or running: queueing costs the host a hand-off to the
// stream's worker (2 to 3 microseconds here) and pays only when the kernel
// runs long enough for the host to get ahead meanwhile. Its cost is taken as
// the bytes it reads and writes, against kSmallKernelBytes (above). Back to
// back (benchmarks/bench_launch_rule.py, two cores) elementwise ops run
// faster at once at 48 KiB and queued from 192 KiB. Between the launches of
// a model written in Python the host does more work of its own, and the
// stream is idle at most of them: there a queued kernel costs the host the
// hand-off alone, and at once it costs the kernel too. The tiny Hugging Face
// Llama's step (benchmarks/bench_async.py) took 0.92x CPU's with the line at
// 128 KiB, 0.87-0.89x at 64 KiB, 0.77x with every kernel queued; the other
// workloads and the demo did not move. 64 KiB keeps 64x64 small ops at once,
// which an op followed by .item() needs: queued, a 64x64 product then
// .item() took 1.35x CPU's time instead of 0.99x. A kernel onto a busy
// stream is queued in every mode but blocking: it must run after the
// stream's work, and the host need not wait for that. A caller that launches
// kernels back to back with little host work between them (generated code)
// asks for every kernel onto an idle stream at once (kAtOnceWhenIdle).
bool run_at_once(LaunchMode mode, emuStream_t stream, size_t bytes, QueueRule rule) {
  switch (mode) {
    case LaunchMode::kAdaptive:
      return (bytes <= kSmallKernelBytes || rule == QueueRule::kAtOnceWhenIdle) && !stream_busy(stream);
    case LaunchMode::kAuto:
      return !stream_busy(stream);
    case LaunchMode::kQueued:
    case LaunchMode::kBlocking: // launched by launch_kernel before this is asked
      return false;
  }
  return false;
}
// LITERALINCLUDE END: RUN_AT_ONCE

// LITERALINCLUDE START: QUEUE_KERNEL_LAUNCH
void queue_kernel(const c10::Stream& stream, c10::function_ref<void()> kernel,
                  c10::function_ref<std::function<void()>()> make_owning, const char* what, size_t bytes,
                  QueueRule rule) {
  const LaunchMode mode = launch_mode();
  if (mode == LaunchMode::kBlocking || inside_kernel_on(stream) ||
      (C10_UNLIKELY(capture_in_progress()) && is_capturing(stream))) {
    launch_kernel(stream, kernel, make_owning, what);
    return;
  }
  const emuStream_t native = native_stream(stream);
  if (run_at_once(mode, native, bytes, rule)) {
    // Ordered on its stream all the same: the runtime runs it as the
    // stream's next item, traced, modelled and fault-checked like any other.
    g_at_once_launches.fetch_add(1, std::memory_order_relaxed);
    run_and_wait(stream, native, kernel, what, bytes);
    return;
  }
  delete_finished();
  raise_queued_warnings();
  std::function<void()> body;
  {
    const QueueViews views;
    body = make_owning();
  }
  auto* job = new QueuedKernel{std::move(body), stream, {}, what, bytes, take_launch_order()};
  name_launch_for_faults(what);
  const emuError_t err = emuLaunchKernelAsync(native, &run_queued, job);
  if (err != emuSuccess && err != emuErrorLaunchFailure) {
    delete job; // never ran (a launch failure ran it, and it retired itself)
  }
  EMU_CHECK(err);
}
// LITERALINCLUDE END: QUEUE_KERNEL_LAUNCH

LaunchCounts launch_counts() {
  return {launches_ordered(), g_at_once_launches.load(std::memory_order_relaxed),
          g_waited_launches.load(std::memory_order_relaxed)};
}

bool making_queued_kernel() {
  return QueueViews::tls_current != nullptr;
}

c10::Storage queued_view_of(const c10::Storage& storage) {
  QueueViews* views = QueueViews::tls_current;
  TORCH_INTERNAL_ASSERT(views != nullptr, "queued_view_of outside queue_kernel's make_owning");
  const c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  for (const auto& [owner, view] : views->views) {
    if (owner == impl) {
      return view;
    }
  }
  c10::Storage view(c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), storage.sym_nbytes(),
      c10::DataPtr(const_cast<void*>(storage.data()), storage.device()), /*allocator=*/nullptr, /*resizable=*/false));
  views->views.emplace_back(impl, view);
  return view;
}

KernelName::KernelName(const char* name) : pushed_(emuTraceEnabled() != 0) {
  if (pushed_) {
    EMU_CHECK(emuTracePushName(name));
  }
}

KernelName::~KernelName() {
  if (pushed_) {
    (void)emuTracePopName();
  }
}

} // namespace torch_emu
