// Streams: the stream objects, their worker, submitting work and waiting for it.
// The calls that put work on a stream are in events.cpp, copies.cpp and
// launches.cpp; streams_internal.h holds what they share.
//
// A stream is a FIFO of work items executed one at a time, in order. Each
// stream gets a worker thread the first time an item has to wait in the queue.
// When a stream is idle, work is executed directly on the submitting thread
// (the "inline fast path"): most PyTorch ops are submitted to an idle stream,
// and a thread hand-off per op would dominate their cost.
//
// Items carry sequence numbers (1, 2, 3... per stream, in submission order);
// `completed` is the sequence number of the last finished item. Waiting for a
// stream means waiting until `completed` reaches a target, which is what makes
// "wait only for the work queued before me" cheap to express. The front of
// the queue runs once `completed` is one short of its number, which also
// orders it after an item running inline on another thread.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/emu_runtime_env.h"
#include "runtime/streams_internal.h"

namespace emu {

EMU_HOT_TLS thread_local Frame* t_frames = nullptr;
thread_local std::string t_kernel_message;

namespace {

// Registry of the streams of each device, for emuDeviceSynchronize. Leaked on
// purpose: live streams may still be used while static destructors run.
struct StreamRegistry {
  std::mutex mu;
  std::vector<emuStream*> streams[emu::kMaxDevices];
};
StreamRegistry& registry() {
  static StreamRegistry* const r = new StreamRegistry;
  return *r;
}
std::atomic<uint64_t> g_next_stream_id{1};

// LITERALINCLUDE START: SPIN_BEFORE_SLEEP
// A host thread that feeds a stream kernel after kernel and a worker that
// runs them hand work back and forth many times per millisecond. Sleeping on a
// condition variable costs each hand-off two context switches (tens of
// microseconds on a busy machine), more than most kernels; so both sides first
// poll for a short while, as a GPU driver spins before it blocks. On a machine
// with a single core, spinning only delays the other side: there they block
// at once.
template <typename Ready>
bool spin_until(Ready&& ready) {
  static const bool worth_spinning = torch_emu::usable_cores() > 1;
  if (!worth_spinning) return ready();
  constexpr auto kBudget = std::chrono::microseconds(50);
  const Clock::time_point until = Clock::now() + kBudget;
  for (unsigned i = 1;; ++i) {
    if (ready()) return true;
    if (i % 64 == 0) {
      if (Clock::now() >= until) return false;
      std::this_thread::yield();  // let a thread that shares this core run
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
// LITERALINCLUDE END: SPIN_BEFORE_SLEEP

// Executes one item on the calling thread; returns a kernel's result (0 for
// everything else).
int run_work(emuStream* s, const Work& w) {
  const bool modelled = model_applies();
  Frame*& frames = t_frames;  // found once: each thread-local lookup is a call here
  Frame frame{s, w.seq, frames};
  frames = &frame;
  struct PopFrame {
    Frame*& frames;
    Frame* prev;
    ~PopFrame() { frames = prev; }
  } pop{frames, frame.prev};
  emu::TracedWork traced(w.trace);

  switch (w.kind) {
    case WorkKind::kMemcpy:
      copy_bytes(w, modelled);
      return 0;
    case WorkKind::kHostFunc:
      w.host_fn(w.user_data);
      return 0;
    case WorkKind::kKernel: {
      emu::DeviceWorkScope device_work;
      emu::ActivityScope activity(s->device, /*kernel=*/true);
      t_kernel_message.clear();
      if (modelled) emu::hold_launch_latency();
      const Clock::time_point start = modelled ? Clock::now() : Clock::time_point{};
      const int rc = w.kernel_fn(w.user_data);
      if (modelled) emu::hold_kernel(start);
      if (w.injected.fault_id != 0) {
        t_kernel_message = emu::injected_failure_message(w.injected, s->device);
        return rc != 0 ? rc : 1;
      }
      return rc;
    }
    case WorkKind::kEventRecord:
      return 0;  // completed with the item itself (finish_locked), or by a running item's submit
    case WorkKind::kEventWait:
      wait_for_version(w.event, w.version);
      return 0;
  }
  return 0;
}

// Whether the queue's front may run now: every item before it has finished
// (none runs inline elsewhere). Called with s->mu held.
bool front_runnable(const emuStream* s) {
  return !s->queue.empty() && s->queue.front().seq == s->completed.load() + 1;
}

// LITERALINCLUDE START: WAIT_ON
// Waits on `cv` (with s->mu held by `lock`) until `ready`. An item that ran
// inline finishes without the stream's lock (finish_unlocked): it first
// stores `completed`, then looks for sleepers. A sleeper that needs that end
// (`needs_inline_end`) first counts itself, then checks `ready`. Both are
// sequentially consistent, so either the sleeper sees the new `completed` or
// the finisher sees the sleeper and notifies it under the lock, which the
// sleeper holds until it waits. An idle worker (its queue empty) does not
// count: an inline item's end gives it nothing to run, and the lock stays
// off the path of a kernel onto an idle stream.
template <typename Ready, typename Needs>
void wait_on(emuStream* s, std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Ready&& ready,
             Needs&& needs_inline_end) {
  while (!ready()) {
    const bool counted = needs_inline_end();
    if (counted) {
      s->sleepers.fetch_add(1);
      if (ready()) {
        s->sleepers.fetch_sub(1);
        return;
      }
    }
    cv.wait(lock);
    if (counted) s->sleepers.fetch_sub(1);
  }
}
constexpr auto kAlways = [] { return true; };
// LITERALINCLUDE END: WAIT_ON

// Wakes what may wait for an item's end: the worker if the queue's front can
// now run, and the waiting threads. Called with s->mu held.
void notify_finished_locked(emuStream* s) {
  if (front_runnable(s) && s->helpers == 0) s->work_cv.notify_one();
  s->done_cv.notify_all();
}

// Marks item `w` finished. Called with s->mu held. An event record completes
// here, under the stream's lock, as the stream counts it done: who sees the
// event complete and then queries the stream (which takes the lock) finds the
// stream done too, as after cudaEventSynchronize, and the other way round.
void finish_locked(emuStream* s, const Work& w) {
  if (w.kind == WorkKind::kEventRecord) complete_record(w.event, w.version);
  s->completed.store(w.seq);
  notify_finished_locked(s);
}

// Marks item `w`, which ran inline, finished: without the lock unless a
// thread sleeps on the stream (wait_on). Not for an event record, which
// completes under the lock (finish_locked).
void finish_unlocked(emuStream* s, const Work& w) {
  s->completed.store(w.seq);
  if (s->sleepers.load() != 0) {
    std::lock_guard<std::mutex> lock(s->mu);
    notify_finished_locked(s);
  }
}

// Takes the front item and runs it on this thread (the worker, or a thread
// waiting for the stream). Called with s->mu held; released while it runs.
void run_front_locked(emuStream* s, std::unique_lock<std::mutex>& lock) {
  const Work w = s->queue.front();
  s->queue.pop_front();
  lock.unlock();
  int rc;
  try {
    rc = run_work(s, w);
  } catch (...) {
    rc = -1;  // nobody to throw to: report it as a failure, as the worker does
  }
  lock.lock();
  if (rc != 0) {
    s->failed_rc = rc;
    s->failed_message = std::move(t_kernel_message);
  }
  finish_locked(s, w);
  if (w.event != nullptr) {
    lock.unlock();
    release(w.event);
    lock.lock();
  }
}

void apply_priority(int priority) {
  // Best effort: a higher priority (lower number) gets a lower nice value.
  // Lowering nice usually needs privileges; failing is fine.
  if (priority == 0) return;
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  errno = 0;
  const int nice_now = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (nice_now == -1 && errno != 0) return;
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice_now + priority);
}

// LITERALINCLUDE START: STREAM_WORKER
void worker_main(emuStream* s) {
  apply_priority(s->priority);
  std::unique_lock<std::mutex> lock(s->mu);
  for (;;) {
    if (s->queue.empty() && !s->stop) {
      const uint64_t seen = s->submitted.load(std::memory_order_relaxed);
      lock.unlock();
      spin_until([s, seen] { return s->submitted.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
    // The front waits for an item running inline on another thread, which
    // keeps the stream in order. While a thread waiting for the stream runs
    // its items, the worker leaves them to it.
    wait_on(
        s, s->work_cv, lock,
        [s] { return (front_runnable(s) && s->helpers == 0) || (s->stop && s->queue.empty()); },
        [s] { return !s->queue.empty(); });
    if (s->queue.empty()) return;  // stop requested, and drained
    run_front_locked(s, lock);
  }
}
// LITERALINCLUDE END: STREAM_WORKER

// LITERALINCLUDE START: WAITER_RUNS_WORK
// A thread that waits for a stream has nothing else to do, and the host
// thread's kernels use all the cores (a worker's team gets the ones the host
// leaves free): so, as long as it waits, it runs the stream's queued items
// itself, in order, one at a time as the worker would; the worker steps
// aside. Only outside running work: a kernel that waits for another stream
// must not run that stream's items inside its own.
void help_until_completed(emuStream* s, uint64_t target) {
  std::unique_lock<std::mutex> lock(s->mu);
  ++s->helpers;
  while (s->completed < target) {
    if (front_runnable(s)) {
      run_front_locked(s, lock);
      continue;
    }
    // The worker (or another thread) is running an item: wait for it.
    const uint64_t seen = s->completed;
    lock.unlock();
    spin_until([s, seen] { return s->completed.load(std::memory_order_acquire) != seen; });
    lock.lock();
    wait_on(s, s->done_cv, lock, [&] { return s->completed >= target || front_runnable(s); }, kAlways);
  }
  if (--s->helpers == 0 && front_runnable(s)) s->work_cv.notify_one();
}
// LITERALINCLUDE END: WAITER_RUNS_WORK

} // namespace

emuError_t check_stream(const char* call, const emuStream* s) {
  if (s == nullptr || s->magic != kStreamMagic) {
    return set_error(emuErrorInvalidResourceHandle, "%s: invalid stream handle %p", call,
                     static_cast<const void*>(s));
  }
  return emuSuccess;
}

// LITERALINCLUDE START: INLINE_FAST_PATH
// Claims the next sequence number of `s` if the stream is idle: everything
// submitted has finished. One compare-and-swap, no lock: a submitter that
// queues takes its number with an atomic increment under the lock, so of the
// two, the second sees the stream busy.
bool claim_if_idle(emuStream* s, uint64_t* seq) {
  uint64_t done = s->completed.load();
  if (s->submitted.load() != done) return false;
  if (!s->submitted.compare_exchange_strong(done, done + 1)) return false;
  *seq = done + 1;
  return true;
}

// Hands `w` to stream `s`: runs it right here if the stream is idle (nothing
// queued, nothing running), else appends it to the queue for the worker.
emuError_t submit(const char* call, emuStream* s, Work w, bool allow_inline, Submitted* out) {
  if (allow_inline) {
    if (const Frame* running = executing_frame(s)) {
      // Submitted by work this thread is running on `s` (a kernel whose code
      // copies or launches): it is part of that work and must happen inside
      // it, in program order, so it runs right here.
      out->seq = running->seq;
      out->ran_inline = true;
      out->rc = run_work(s, w);
      if (w.kind == WorkKind::kEventRecord) complete_record(w.event, w.version);
      return emuSuccess;
    }
  }
  if (allow_inline && claim_if_idle(s, &w.seq)) {
    // Concurrent submitters now queue behind us. Finish the item even if a
    // host function throws through us.
    struct Finish {
      emuStream* s;
      const Work& w;
      ~Finish() {
        if (w.kind == WorkKind::kEventRecord) {
          std::lock_guard<std::mutex> lock(s->mu);
          finish_locked(s, w);
        } else {
          finish_unlocked(s, w);
        }
      }
    } finish{s, w};
    out->seq = w.seq;
    out->ran_inline = true;
    out->rc = run_work(s, w);
    return emuSuccess;
  }

  std::unique_lock<std::mutex> lock(s->mu);

  if (!s->worker.joinable()) {
    try {
      s->worker = std::thread(worker_main, s);
    } catch (const std::exception& e) {
      return set_error(emuErrorMemoryAllocation, "%s: could not start the worker thread of a "
                       "stream on emu:%d (%s)", call, s->device, e.what());
    }
  }
  w.seq = s->submitted.fetch_add(1) + 1;
  if (w.event != nullptr) retain(w.event);
  s->queue.push_back(w);
  s->work_cv.notify_one();
  out->seq = w.seq;
  return emuSuccess;
}
// LITERALINCLUDE END: INLINE_FAST_PATH

// Waits until item `target` of `s` has finished.
void wait_until_completed(emuStream* s, uint64_t target) {
  if (s->completed.load(std::memory_order_acquire) >= target) return;
  if (t_frames == nullptr) {
    help_until_completed(s, target);
    return;
  }
  if (spin_until([s, target] { return s->completed.load(std::memory_order_acquire) >= target; })) return;
  std::unique_lock<std::mutex> lock(s->mu);
  wait_on(s, s->done_cv, lock, [&] { return s->completed >= target; }, kAlways);
}

// Waits for everything submitted to `s` so far, except when this thread is
// executing an item of `s`: then only for the items before that one (which
// are already done, since items run in order), so there is nothing to wait for.
void drain(emuStream* s) {
  if (executing_frame(s) != nullptr) return;
  wait_until_completed(s, s->submitted.load(std::memory_order_acquire));
}

// Reports (once) a failure of a kernel that ran on the worker.
emuError_t take_failure(const char* call, emuStream* s) {
  if (s->failed_rc.load(std::memory_order_acquire) == 0) return emuSuccess;
  std::string message;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    message = std::move(s->failed_message);
  }
  const int rc = s->failed_rc.exchange(0);
  if (rc == 0) return emuSuccess;  // another thread reported it
  const std::string detail = message.empty() ? " (it returned " + std::to_string(rc) + ")" : ": " + message;
  return set_error(emuErrorLaunchFailure, "%s: a kernel launched earlier on stream %llu (emu:%d) failed%s",
                   call, static_cast<unsigned long long>(s->id), s->device, detail.c_str());
}

// Calls fn(stream) for every stream of `device`, on a snapshot (with
// references) so that streams can be created or destroyed meanwhile without
// the registry lock being held for that long.
template <typename Fn>
void for_each_stream(int device, Fn&& fn) {
  std::vector<emuStream*> streams;
  {
    StreamRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    streams = r.streams[device];
    for (emuStream* s : streams) retain(s);
  }
  for (emuStream* s : streams) {
    fn(s);
    release(s);
  }
}

emuError_t synchronize_device(const char* call, int device) {
  emuError_t failure = emuSuccess;
  for_each_stream(device, [&](emuStream* s) {
    drain(s);
    if (failure == emuSuccess) failure = take_failure(call, s);  // one report per call
  });
  return failure;
}

void wait_for_device_outside_work(int device) {
  if (t_frames == nullptr) for_each_stream(device, [](emuStream* s) { drain(s); });
}

int stream_device(emuStream_t stream) { return stream->device; }

// LITERALINCLUDE START: CAPTURE_HOOK
// Work submitted to a capturing stream from outside running work (work from
// inside a running kernel is part of that kernel) is recorded. Kernels and
// copies also run now, inline, after the work queued before them.
emuError_t capture_hook(const char* call, emuStream* s, const GraphNode& node, bool* captured) {
  *captured = false;
  if (!capture_active() || executing_frame(s) != nullptr) return emuSuccess;
  if (emuError_t err = capture_node(call, s, node, captured)) return err;
  if (*captured) drain(s);
  return emuSuccess;
}
// LITERALINCLUDE END: CAPTURE_HOOK

} // namespace emu

// The native runtime's stream calls (plugin.cpp makes them the API).
namespace emu::native {

emuError_t emuDeviceGetStreamPriorityRange(int* least, int* greatest) {
  EMU_API_ENTER();
  if (least == nullptr || greatest == nullptr) {
    return set_error(emuErrorInvalidValue, "emuDeviceGetStreamPriorityRange: null output pointer");
  }
  *least = 0;
  *greatest = -1;
  return emuSuccess;
}

emuError_t emuDeviceSynchronize(int device) {
  EMU_API_ENTER();
  if (emuError_t err = emu::check_device("emuDeviceSynchronize", device)) return err;
  if (emu::capture_active()) {
    if (emuError_t err = emu::forbid_if_device_capturing("emuDeviceSynchronize", device)) return err;
  }
  return emu::synchronize_device("emuDeviceSynchronize", device);
}

emuError_t emuStreamCreateWithPriority(emuStream_t* stream, int priority) {
  EMU_API_ENTER();
  if (stream == nullptr) {
    return set_error(emuErrorInvalidValue, "emuStreamCreateWithPriority: stream is null");
  }
  emu::note_device_state_created();
  emuStream* s = new emuStream;
  s->id = g_next_stream_id.fetch_add(1, std::memory_order_relaxed);
  s->device = emu::current_device();
  s->priority = std::min(0, std::max(-1, priority));
  StreamRegistry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.streams[s->device].push_back(s);
  }
  *stream = s;
  return emuSuccess;
}

emuError_t emuStreamDestroy(emuStream_t stream) {
  EMU_API_ENTER_RELEASE();
  if (emuError_t err = check_stream("emuStreamDestroy", stream)) return err;
  if (executing_frame(stream) != nullptr) {
    return set_error(emuErrorInvalidValue,
                     "emuStreamDestroy: cannot destroy stream %p from work running on it",
                     static_cast<void*>(stream));
  }
  drain(stream);
  {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->stop = true;
  }
  stream->work_cv.notify_all();
  if (stream->worker.joinable()) stream->worker.join();
  StreamRegistry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto& list = r.streams[stream->device];
    list.erase(std::find(list.begin(), list.end(), stream));
  }
  stream->magic = kDeadMagic;
  release(stream);
  return emuSuccess;
}

emuError_t emuStreamGetDevice(emuStream_t stream, int* device) {
  EMU_API_ENTER();
  if (device == nullptr) return set_error(emuErrorInvalidValue, "emuStreamGetDevice: device is null");
  // Looked up rather than dereferenced: the handle may come from outside
  // (torch.emu.ExternalStream), so any value must give a clean error.
  std::lock_guard<std::mutex> lock(registry().mu);
  for (int d = 0; d < emu::kMaxDevices; ++d) {
    const std::vector<emuStream*>& streams = registry().streams[d];
    if (std::find(streams.begin(), streams.end(), stream) != streams.end()) {
      *device = d;
      return emuSuccess;
    }
  }
  return set_error(emuErrorInvalidResourceHandle, "emuStreamGetDevice: %p is not a live emu stream",
                   static_cast<const void*>(stream));
}

emuError_t emuStreamGetPriority(emuStream_t stream, int* priority) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamGetPriority", stream)) return err;
  if (priority == nullptr) {
    return set_error(emuErrorInvalidValue, "emuStreamGetPriority: priority is null");
  }
  *priority = stream->priority;
  return emuSuccess;
}

emuError_t emuStreamQuery(emuStream_t stream) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamQuery", stream)) return err;
  if (emu::capture_active() && executing_frame(stream) == nullptr) {
    if (emuError_t err = emu::forbid_if_capturing("emuStreamQuery", stream)) return err;
  }
  {
    // Busy first, failure second: checked the other way round, a kernel that
    // failed in between would go unreported by this query (a later call would report it).
    std::lock_guard<std::mutex> lock(stream->mu);
    if (stream->submitted.load() != stream->completed.load()) return emuErrorNotReady;
  }
  return take_failure("emuStreamQuery", stream);
}

emuError_t emuStreamGetPendingWork(emuStream_t stream, int* pending) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamGetPendingWork", stream)) return err;
  if (pending == nullptr) return set_error(emuErrorInvalidValue, "emuStreamGetPendingWork: pending is null");
  *pending = stream->submitted.load(std::memory_order_acquire) != stream->completed.load(std::memory_order_acquire);
  return emuSuccess;
}

emuError_t emuStreamSynchronize(emuStream_t stream) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamSynchronize", stream)) return err;
  if (emu::capture_active() && executing_frame(stream) == nullptr) {
    if (emuError_t err = emu::forbid_if_capturing("emuStreamSynchronize", stream)) return err;
  }
  drain(stream);
  return take_failure("emuStreamSynchronize", stream);
}

} // namespace emu::native

extern "C" {

emuError_t emuStreamGetId(emuStream_t stream, uint64_t* id) {
  EMU_API_ENTER();
  if (emuError_t err = emu::check_stream("emuStreamGetId", stream)) return err;
  if (id == nullptr) return emu::set_error(emuErrorInvalidValue, "emuStreamGetId: id is null");
  *id = stream->id;
  return emuSuccess;
}

} // extern "C"
