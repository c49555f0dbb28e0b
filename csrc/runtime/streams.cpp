// Streams, events, copies and launches.
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
// "wait only for the work queued before me" cheap to express.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/runtime_internal.h"

using emu::set_error;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kStreamMagic = 0x5354524d;  // "STRM"
constexpr uint32_t kEventMagic = 0x4556454e;   // "EVEN"
constexpr uint32_t kDeadMagic = 0xdeadbeef;

enum class WorkKind : uint8_t { kMemcpy, kHostFunc, kKernel, kEventRecord, kEventWait };

// One queued operation. A plain struct (no std::function) so that submitting
// to an idle stream allocates nothing.
struct Work {
  WorkKind kind;
  bool device_access = false;  // kMemcpy: touches device memory (strict mode)
  int devices[2] = {-1, -1};   // kMemcpy: devices whose memory it touches (utilization)
  uint64_t seq = 0;
  void* dst = nullptr;  // kMemcpy
  const void* src = nullptr;
  size_t bytes = 0;
  emuHostFn_t host_fn = nullptr;      // kHostFunc
  emuKernelFn_t kernel_fn = nullptr;  // kKernel
  void* user_data = nullptr;
  emuEvent* event = nullptr;  // kEventRecord / kEventWait (a reference is held while queued)
  uint64_t version = 0;
  emu::TraceRecord* trace = nullptr;  // kMemcpy / kKernel submitted while tracing
  emu::InjectedFailure injected;      // kKernel: an injected fault fails it (faults.cpp)
};

// A stream's FIFO: a ring that only grows, so that pushing (on the host) and
// popping (on the worker) allocate and free nothing. A std::deque frees, on
// the worker, a block the host allocated every few items, and glibc's malloc
// then locks the host's arena from both threads.
class WorkQueue {
 public:
  bool empty() const { return size_ == 0; }
  const Work& front() const { return ring_[head_]; }
  void pop_front() {
    head_ = (head_ + 1) % ring_.size();
    --size_;
  }
  void push_back(const Work& w) {
    if (size_ == ring_.size()) grow();
    ring_[(head_ + size_) % ring_.size()] = w;
    ++size_;
  }

 private:
  void grow() {
    std::vector<Work> bigger(std::max<size_t>(64, 2 * ring_.size()));
    for (size_t i = 0; i < size_; ++i) bigger[i] = ring_[(head_ + i) % ring_.size()];
    ring_.swap(bigger);
    head_ = 0;
  }
  std::vector<Work> ring_;
  size_t head_ = 0;
  size_t size_ = 0;
};

} // namespace

struct emuEvent {
  uint32_t magic = kEventMagic;
  // Owned by the handle and by every queued item that refers to it, so that
  // emuEventDestroy with records still pending is safe.
  std::atomic<int> refs{1};
  bool timing = true;

  std::mutex mu;
  std::condition_variable cv;
  uint64_t version = 0;  // latest recorded version (0: never recorded)
  int device = -1;
  uint64_t record_stream_id = 0;  // stream of the latest record
  // Versions may complete out of order when one event is recorded on several
  // streams: all versions <= done_through are complete, plus those listed.
  uint64_t done_through = 0;
  std::vector<uint64_t> done_out_of_order;
  uint64_t stamp_version = 0;
  Clock::time_point stamp;

  bool is_complete_locked(uint64_t v) const {
    return v <= done_through ||
           std::find(done_out_of_order.begin(), done_out_of_order.end(), v) !=
               done_out_of_order.end();
  }
};

struct emuStream {
  uint32_t magic = kStreamMagic;
  // Owned by the handle, plus temporarily by emuDeviceSynchronize snapshots.
  std::atomic<int> refs{1};
  uint64_t id = 0;
  int device = 0;
  int priority = 0;

  std::mutex mu;
  std::condition_variable work_cv;  // worker: an item became runnable, or stop
  std::condition_variable done_cv;  // waiters: an item finished
  WorkQueue queue;
  bool running = false;  // an item executes (on the worker or inline)
  bool stop = false;
  int helpers = 0;       // threads waiting for the stream that run its items meanwhile
  // Written under `mu`; atomic so that waiting on an idle stream (the common
  // case: every kernel launch is followed by a wait) takes no lock.
  std::atomic<uint64_t> submitted{0};  // sequence number of the last submitted item
  std::atomic<uint64_t> completed{0};  // sequence number of the last finished item
  std::atomic<int> failed_rc{0};       // non-zero: a worker-run kernel failed, not yet reported
  std::string failed_message;          // what it said (emuKernelSetErrorMessage), under `mu`
  std::thread worker;
};

namespace {

// The items this thread is executing right now, innermost first: a kernel
// running inline on stream A may itself submit to (and run inline on) B.
struct Frame {
  emuStream* stream;
  uint64_t seq;
  Frame* prev;
};
thread_local Frame* t_frames = nullptr;
// What the kernel running on this thread said about its failure.
thread_local std::string t_kernel_message;

// Whether the performance model applies to work starting on this thread now:
// to the stream's own work, not to the copies and launches a running kernel
// makes as part of its own work.
bool model_applies() {
  return emu::g_model.active && t_frames == nullptr;
}

const Frame* executing_frame(const emuStream* s) {
  for (const Frame* f = t_frames; f != nullptr; f = f->prev) {
    if (f->stream == s) return f;
  }
  return nullptr;
}

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

void retain(emuStream* s) { s->refs.fetch_add(1, std::memory_order_relaxed); }
void release(emuStream* s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}
void retain(emuEvent* e) { e->refs.fetch_add(1, std::memory_order_relaxed); }
void release(emuEvent* e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
}

emuError_t check_stream(const char* call, const emuStream* s) {
  if (s == nullptr || s->magic != kStreamMagic) {
    return set_error(emuErrorInvalidResourceHandle, "%s: invalid stream handle %p", call,
                     static_cast<const void*>(s));
  }
  return emuSuccess;
}

emuError_t check_event(const char* call, const emuEvent* e) {
  if (e == nullptr || e->magic != kEventMagic) {
    return set_error(emuErrorInvalidResourceHandle, "%s: invalid event handle %p", call,
                     static_cast<const void*>(e));
  }
  return emuSuccess;
}

// ---- events ----

// LITERALINCLUDE START: EVENT_RECORD
// Runs when the record item reaches the front of its stream: everything
// submitted before it has finished, so version `v` is complete.
void complete_record(emuEvent* e, uint64_t v) {
  const Clock::time_point now = e->timing ? Clock::now() : Clock::time_point();
  std::lock_guard<std::mutex> lock(e->mu);
  if (v == e->done_through + 1) {
    e->done_through = v;
    // Absorb versions that completed early on other streams.
    for (auto it = e->done_out_of_order.begin(); it != e->done_out_of_order.end();) {
      if (*it == e->done_through + 1) {
        e->done_through = *it;
        e->done_out_of_order.erase(it);
        it = e->done_out_of_order.begin();
      } else {
        ++it;
      }
    }
  } else if (v > e->done_through) {
    e->done_out_of_order.push_back(v);
  }
  if (v >= e->stamp_version) {
    e->stamp_version = v;
    e->stamp = now;
  }
  e->cv.notify_all();
}
// LITERALINCLUDE END: EVENT_RECORD

void wait_for_version(emuEvent* e, uint64_t v) {
  std::unique_lock<std::mutex> lock(e->mu);
  e->cv.wait(lock, [&] { return e->is_complete_locked(v); });
}

// ---- executing work ----

// LITERALINCLUDE START: PARALLEL_COPY
// A real copy engine saturates memory bandwidth; one host thread does not. Big
// copies between disjoint ranges are split across the machine's cores (a few
// tens of microseconds of thread start-up against milliseconds of copying).
void move_bytes(void* dst, const void* src, size_t n) {
  constexpr size_t kParallelFrom = 2u << 20;
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  const bool disjoint = d + n <= s || s + n <= d;
  // Read once: each call reads the kernel's file of online cores, a
  // microsecond, which a 4-byte copy (.item()) paid every time.
  static const size_t threads = std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 8);
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

// `modelled`: the copy takes at least the performance model's time.
void copy_bytes(const Work& w, bool modelled) {
  emu::DeviceWorkScope device_work(w.device_access);
  emu::ActivityScope dst_activity(w.devices[0], /*kernel=*/false);
  emu::ActivityScope src_activity(w.devices[1] != w.devices[0] ? w.devices[1] : -1, /*kernel=*/false);
  const Clock::time_point start = modelled ? Clock::now() : Clock::time_point{};
  move_bytes(w.dst, w.src, w.bytes);
  if (modelled) emu::hold_copy(start, w.devices[0], w.devices[1], w.bytes);
}

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
  static const bool worth_spinning = std::thread::hardware_concurrency() > 1;
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
  Frame frame{s, w.seq, t_frames};
  t_frames = &frame;
  struct PopFrame {
    Frame* prev;
    ~PopFrame() { t_frames = prev; }
  } pop{frame.prev};
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

// Marks item `w` finished. Called with s->mu held. An event record completes
// here, under the stream's lock, as the stream counts it done: who sees the
// event complete and then queries the stream (which takes the lock) finds the
// stream done too, as after cudaEventSynchronize, and the other way round.
void finish_locked(emuStream* s, const Work& w) {
  if (w.kind == WorkKind::kEventRecord) complete_record(w.event, w.version);
  s->running = false;
  s->completed = w.seq;
  if (!s->queue.empty() && s->helpers == 0) s->work_cv.notify_one();
  s->done_cv.notify_all();
}

// Takes the front item and runs it on this thread (the worker, or a thread
// waiting for the stream). Called with s->mu held; released while it runs.
void run_front_locked(emuStream* s, std::unique_lock<std::mutex>& lock) {
  const Work w = s->queue.front();
  s->queue.pop_front();
  s->running = true;
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
    // `running` may be an inline item on another thread: queued items wait
    // for it, which keeps the stream in order. While a thread waiting for
    // the stream runs its items, the worker leaves them to it.
    s->work_cv.wait(lock, [s] {
      return (!s->queue.empty() && !s->running && s->helpers == 0) || (s->stop && s->queue.empty());
    });
    if (s->queue.empty()) return;  // stop requested, and drained
    run_front_locked(s, lock);
  }
}
// LITERALINCLUDE END: STREAM_WORKER

struct Submitted {
  uint64_t seq = 0;
  bool ran_inline = false;
  int rc = 0;  // the kernel's result when it ran inline
};

// LITERALINCLUDE START: INLINE_FAST_PATH
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
  std::unique_lock<std::mutex> lock(s->mu);
  if (allow_inline && !s->running && s->queue.empty()) {
    w.seq = ++s->submitted;
    s->running = true;  // concurrent submitters now queue behind us
    lock.unlock();
    // Restore the stream even if a host function throws through us.
    struct Finish {
      emuStream* s;
      const Work& w;
      ~Finish() {
        std::lock_guard<std::mutex> relock(s->mu);
        finish_locked(s, w);
      }
    } finish{s, w};
    out->seq = w.seq;
    out->ran_inline = true;
    out->rc = run_work(s, w);
    return emuSuccess;
  }

  if (!s->worker.joinable()) {
    try {
      s->worker = std::thread(worker_main, s);
    } catch (const std::exception& e) {
      return set_error(emuErrorMemoryAllocation, "%s: could not start the worker thread of a "
                       "stream on emu:%d (%s)", call, s->device, e.what());
    }
  }
  w.seq = ++s->submitted;
  if (w.event != nullptr) retain(w.event);
  s->queue.push_back(w);
  s->work_cv.notify_one();
  out->seq = w.seq;
  return emuSuccess;
}
// LITERALINCLUDE END: INLINE_FAST_PATH

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
    if (!s->running && !s->queue.empty()) {
      run_front_locked(s, lock);
      continue;
    }
    // The worker (or another thread) is running an item: wait for it.
    const uint64_t seen = s->completed;
    lock.unlock();
    spin_until([s, seen] { return s->completed.load(std::memory_order_acquire) != seen; });
    lock.lock();
    s->done_cv.wait(lock, [&] { return s->completed >= target || (!s->running && !s->queue.empty()); });
  }
  if (--s->helpers == 0 && !s->queue.empty() && !s->running) s->work_cv.notify_one();
}
// LITERALINCLUDE END: WAITER_RUNS_WORK

// Waits until item `target` of `s` has finished.
void wait_until_completed(emuStream* s, uint64_t target) {
  if (s->completed.load(std::memory_order_acquire) >= target) return;
  if (t_frames == nullptr) {
    help_until_completed(s, target);
    return;
  }
  if (spin_until([s, target] { return s->completed.load(std::memory_order_acquire) >= target; })) return;
  std::unique_lock<std::mutex> lock(s->mu);
  s->done_cv.wait(lock, [&] { return s->completed >= target; });
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

// ---- copies ----

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

namespace emu {

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

void retain_event(emuEvent_t event) { retain(event); }
void release_event(emuEvent_t event) { release(event); }
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

// The native runtime's stream, copy, launch and event calls (runtime_dispatch.cpp
// makes them the API).
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
  if (emuError_t err = take_failure("emuStreamQuery", stream)) return err;
  std::lock_guard<std::mutex> lock(stream->mu);
  return (stream->running || !stream->queue.empty()) ? emuErrorNotReady : emuSuccess;
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

emuError_t emuStreamWaitEvent(emuStream_t stream, emuEvent_t event) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamWaitEvent", stream)) return err;
  if (emuError_t err = check_event("emuStreamWaitEvent", event)) return err;
  emu::GraphNode node{emu::GraphNode::kEventWait};
  node.event = event;
  bool captured = false;
  if (emuError_t err = emu::capture_hook("emuStreamWaitEvent", stream, node, &captured)) return err;
  if (captured) return emuSuccess;
  Work w{};
  w.kind = WorkKind::kEventWait;
  w.event = event;
  {
    std::lock_guard<std::mutex> lock(event->mu);
    w.version = event->version;
    if (w.version == 0 || event->is_complete_locked(w.version)) return emuSuccess;
  }
  // Never inline: waiting is the worker's job, the caller must not block.
  Submitted submitted;
  return submit("emuStreamWaitEvent", stream, w, /*allow_inline=*/false, &submitted);
}

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

namespace {

emuError_t launch_host_func(const char* call, emuStream_t stream, emuHostFn_t fn, void* user_data,
                            bool allow_inline) {
  if (emuError_t err = check_stream(call, stream)) return err;
  if (fn == nullptr) return set_error(emuErrorInvalidValue, "%s: fn is null", call);
  emu::GraphNode node{emu::GraphNode::kHostFunc};
  node.host_fn = fn;
  node.user_data = user_data;
  bool captured = false;
  if (emuError_t err = emu::capture_hook(call, stream, node, &captured)) return err;
  if (captured) return emuSuccess;  // host functions run at replay only
  Work w{};
  w.kind = WorkKind::kHostFunc;
  w.host_fn = fn;
  w.user_data = user_data;
  Submitted submitted;
  return submit(call, stream, w, allow_inline || executing_frame(stream) != nullptr, &submitted);
}

} // namespace

emuError_t emuLaunchHostFunc(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch_host_func("emuLaunchHostFunc", stream, fn, user_data, /*allow_inline=*/true);
}

emuError_t emuLaunchHostFuncAsync(emuStream_t stream, emuHostFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch_host_func("emuLaunchHostFuncAsync", stream, fn, user_data, /*allow_inline=*/false);
}

namespace {

emuError_t launch(const char* call, emuStream_t stream, emuKernelFn_t fn, void* user_data, bool allow_inline) {
  if (emuError_t err = check_stream(call, stream)) return err;
  if (fn == nullptr) return set_error(emuErrorInvalidValue, "%s: fn is null", call);
  emu::GraphNode node{emu::GraphNode::kKernel};
  node.kernel_fn = fn;
  node.user_data = user_data;
  bool captured = false;
  if (emuError_t err = emu::capture_hook(call, stream, node, &captured)) return err;
  Work w{};
  w.kind = WorkKind::kKernel;
  w.kernel_fn = fn;
  w.user_data = user_data;
  if (emu::faults_armed()) {
    if (emuError_t err = emu::fault_on_launch(call, stream->device, &w.injected)) {
      return err;
    }
  }
  emu::TracedCall traced(emuActivityKindKernel, stream->device, stream->id);
  w.trace = traced.record();
  Submitted submitted;
  // Work launched from work running on `stream` is part of it: in place.
  allow_inline = allow_inline || executing_frame(stream) != nullptr;
  if (emuError_t err = submit(call, stream, w, allow_inline, &submitted)) {
    traced.not_queued();
    return err;
  }
  if (submitted.rc != 0) {
    if (!t_kernel_message.empty()) {
      return set_error(emuErrorLaunchFailure, "%s: the kernel failed on emu:%d: %s", call, stream->device,
                       t_kernel_message.c_str());
    }
    return set_error(emuErrorLaunchFailure, "%s: the kernel returned %d on emu:%d", call, submitted.rc,
                     stream->device);
  }
  return emuSuccess;
}

} // namespace

emuError_t emuLaunchKernel(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch("emuLaunchKernel", stream, fn, user_data, /*allow_inline=*/true);
}

emuError_t emuLaunchKernelAsync(emuStream_t stream, emuKernelFn_t fn, void* user_data) {
  EMU_API_ENTER();
  return launch("emuLaunchKernelAsync", stream, fn, user_data, /*allow_inline=*/false);
}

emuError_t emuKernelSetErrorMessage(const char* message) {
  EMU_API_ENTER();
  if (message == nullptr) return set_error(emuErrorInvalidValue, "emuKernelSetErrorMessage: message is null");
  if (t_frames == nullptr) {
    return set_error(emuErrorInvalidValue, "emuKernelSetErrorMessage: not called from a running kernel");
  }
  t_kernel_message = message;
  return emuSuccess;
}

emuError_t emuEventCreateWithFlags(emuEvent_t* event, unsigned int flags) {
  EMU_API_ENTER();
  if (event == nullptr) return set_error(emuErrorInvalidValue, "emuEventCreateWithFlags: event is null");
  if ((flags & ~static_cast<unsigned>(emuEventDisableTiming)) != 0) {
    return set_error(emuErrorInvalidValue, "emuEventCreateWithFlags: invalid flags 0x%x", flags);
  }
  emuEvent* e = new emuEvent;
  e->timing = (flags & emuEventDisableTiming) == 0;
  *event = e;
  return emuSuccess;
}

emuError_t emuEventDestroy(emuEvent_t event) {
  EMU_API_ENTER_RELEASE();
  if (emuError_t err = check_event("emuEventDestroy", event)) return err;
  event->magic = kDeadMagic;
  release(event);  // queued items keep it alive until they have run
  return emuSuccess;
}

emuError_t emuEventRecord(emuEvent_t event, emuStream_t stream) {
  EMU_API_ENTER();
  if (emuError_t err = check_event("emuEventRecord", event)) return err;
  if (emuError_t err = check_stream("emuEventRecord", stream)) return err;
  emu::GraphNode node{emu::GraphNode::kEventRecord};
  node.event = event;
  bool captured = false;
  if (emuError_t err = emu::capture_hook("emuEventRecord", stream, node, &captured)) return err;
  if (captured) return emuSuccess;
  Work w{};
  w.kind = WorkKind::kEventRecord;
  w.event = event;
  {
    std::lock_guard<std::mutex> lock(event->mu);
    w.version = ++event->version;
    event->device = stream->device;
    event->record_stream_id = stream->id;
  }
  Submitted submitted;
  return submit("emuEventRecord", stream, w, /*allow_inline=*/true, &submitted);
}

emuError_t emuEventQuery(emuEvent_t event) {
  EMU_API_ENTER();
  if (emuError_t err = check_event("emuEventQuery", event)) return err;
  if (emu::capture_active()) {
    if (emuError_t err = emu::forbid_if_event_captured("emuEventQuery", event)) return err;
  }
  std::lock_guard<std::mutex> lock(event->mu);
  return event->is_complete_locked(event->version) ? emuSuccess : emuErrorNotReady;
}

emuError_t emuEventSynchronize(emuEvent_t event) {
  EMU_API_ENTER();
  if (emuError_t err = check_event("emuEventSynchronize", event)) return err;
  if (emu::capture_active()) {
    if (emuError_t err = emu::forbid_if_event_captured("emuEventSynchronize", event)) return err;
  }
  std::unique_lock<std::mutex> lock(event->mu);
  const uint64_t v = event->version;
  if (event->is_complete_locked(v)) return emuSuccess;
  // From work running on the recording stream, a pending record is queued
  // behind the caller: everything it covers up to the caller is done already.
  for (const Frame* f = t_frames; f != nullptr; f = f->prev) {
    if (f->stream->id == event->record_stream_id) return emuSuccess;
  }
  event->cv.wait(lock, [&] { return event->is_complete_locked(v); });
  return emuSuccess;
}

emuError_t emuEventElapsedTime(float* ms, emuEvent_t start, emuEvent_t end) {
  EMU_API_ENTER();
  if (ms == nullptr) return set_error(emuErrorInvalidValue, "emuEventElapsedTime: ms is null");
  if (emuError_t err = check_event("emuEventElapsedTime", start)) return err;
  if (emuError_t err = check_event("emuEventElapsedTime", end)) return err;
  Clock::time_point stamps[2];
  int devices[2];
  emuEvent* events[2] = {start, end};
  for (int i = 0; i < 2; ++i) {
    emuEvent* e = events[i];
    const char* which = i == 0 ? "start" : "end";
    if (!e->timing) {
      return set_error(emuErrorInvalidResourceHandle,
                       "emuEventElapsedTime: %s event was created with timing disabled", which);
    }
    std::lock_guard<std::mutex> lock(e->mu);
    if (e->version == 0) {
      return set_error(emuErrorNotReady, "emuEventElapsedTime: %s event was never recorded", which);
    }
    if (!e->is_complete_locked(e->version)) {
      return set_error(emuErrorNotReady, "emuEventElapsedTime: %s event has not completed yet",
                       which);
    }
    stamps[i] = e->stamp;
    devices[i] = e->device;
  }
  // As CUDA's cudaEventElapsedTime: events on two devices are not timed against each other.
  if (devices[0] != devices[1]) {
    return set_error(emuErrorInvalidResourceHandle,
                     "emuEventElapsedTime: the start event was recorded on emu:%d and the end event on emu:%d; "
                     "both must be recorded on the same device",
                     devices[0], devices[1]);
  }
  *ms = std::chrono::duration<float, std::milli>(stamps[1] - stamps[0]).count();
  return emuSuccess;
}

} // namespace emu::native

extern "C" {

emuError_t emuStreamGetId(emuStream_t stream, uint64_t* id) {
  EMU_API_ENTER();
  if (emuError_t err = check_stream("emuStreamGetId", stream)) return err;
  if (id == nullptr) return set_error(emuErrorInvalidValue, "emuStreamGetId: id is null");
  *id = stream->id;
  return emuSuccess;
}

} // extern "C"
