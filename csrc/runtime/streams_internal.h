// The stream machinery shared by the files that implement the streams section
// of emu_runtime.h: streams.cpp (stream objects, their worker, submitting work
// and waiting for it), events.cpp, copies.cpp and launches.cpp. Private, like
// runtime_internal.h.
//
// A stream is a FIFO of work items executed one at a time, in order (see
// streams.cpp). Every call that puts work on a stream builds a Work item and
// hands it to submit().
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/runtime_internal.h"

namespace emu {

using Clock = std::chrono::steady_clock;

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

} // namespace emu

struct emuEvent {
  uint32_t magic = emu::kEventMagic;
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
  emu::Clock::time_point stamp;

  bool is_complete_locked(uint64_t v) const {
    return v <= done_through ||
           std::find(done_out_of_order.begin(), done_out_of_order.end(), v) !=
               done_out_of_order.end();
  }
};

struct emuStream {
  uint32_t magic = emu::kStreamMagic;
  // Owned by the handle, plus temporarily by emuDeviceSynchronize snapshots.
  std::atomic<int> refs{1};
  uint64_t id = 0;
  int device = 0;
  int priority = 0;

  std::mutex mu;
  std::condition_variable work_cv;  // worker: an item became runnable, or stop
  std::condition_variable done_cv;  // waiters: an item finished
  emu::WorkQueue queue;
  bool stop = false;
  int helpers = 0;       // threads waiting for the stream that run its items meanwhile
  // The stream is idle when submitted == completed; item `completed + 1` is
  // the one that may run. Queued items take their number under `mu`; an
  // item onto an idle stream claims its number without it (submit), and
  // finishes without it unless a thread sleeps on the stream (`sleepers`).
  std::atomic<uint64_t> submitted{0};  // sequence number of the last submitted item
  std::atomic<uint64_t> completed{0};  // sequence number of the last finished item
  std::atomic<int> sleepers{0};        // waiting threads an inline item's end must wake (wait_on)
  std::atomic<int> failed_rc{0};       // non-zero: a worker-run kernel failed, not yet reported
  std::string failed_message;          // what it said (emuKernelSetErrorMessage), under `mu`
  std::thread worker;
};

namespace emu {

// The items this thread is executing right now, innermost first: a kernel
// running inline on stream A may itself submit to (and run inline on) B.
struct Frame {
  emuStream* stream;
  uint64_t seq;
  Frame* prev;
};
extern EMU_HOT_TLS thread_local Frame* t_frames;
// What the kernel running on this thread said about its failure.
extern thread_local std::string t_kernel_message;

// Whether the performance model applies to work starting on this thread now:
// to the stream's own work, not to the copies and launches a running kernel
// makes as part of its own work.
inline bool model_applies() {
  return emu::g_model.active && t_frames == nullptr;
}

inline const Frame* executing_frame(const emuStream* s) {
  for (const Frame* f = t_frames; f != nullptr; f = f->prev) {
    if (f->stream == s) return f;
  }
  return nullptr;
}

inline void retain(emuStream* s) { s->refs.fetch_add(1, std::memory_order_relaxed); }
inline void release(emuStream* s) {
  if (s->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete s;
}
inline void retain(emuEvent* e) { e->refs.fetch_add(1, std::memory_order_relaxed); }
inline void release(emuEvent* e) {
  if (e->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete e;
}

// emuErrorInvalidResourceHandle (with its message) unless `s` is a live stream.
emuError_t check_stream(const char* call, const emuStream* s);

// ---- events.cpp ----

// Completes version `v` of `e`: its record item reached the front of its stream.
void complete_record(emuEvent* e, uint64_t v);
// Blocks until version `v` of `e` has completed.
void wait_for_version(emuEvent* e, uint64_t v);

// ---- copies.cpp ----

// Runs a queued copy on the calling thread; `modelled`: the copy takes at least
// the performance model's time.
void copy_bytes(const Work& w, bool modelled);

// ---- streams.cpp ----

struct Submitted {
  uint64_t seq = 0;
  bool ran_inline = false;
  int rc = 0;  // the kernel's result when it ran inline
};

// Hands `w` to stream `s`: runs it on the calling thread if `allow_inline` and
// the stream is idle, else queues it for the stream's worker.
emuError_t submit(const char* call, emuStream* s, Work w, bool allow_inline, Submitted* out);
// Waits until item `target` of `s` has finished.
void wait_until_completed(emuStream* s, uint64_t target);
// Waits for everything submitted to `s` so far (but not from work running on it).
void drain(emuStream* s);
// Reports (once) a failure of a kernel that ran on the worker.
emuError_t take_failure(const char* call, emuStream* s);
// Work submitted to `s` while it captures a graph is recorded (*captured = true).
emuError_t capture_hook(const char* call, emuStream* s, const GraphNode& node, bool* captured);

} // namespace emu
