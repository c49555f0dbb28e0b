// Activity tracing (emu_runtime_trace.h): records of the kernels and copies
// the streams execute, for a profiler to drain.
//
// A record is started by the submitting API call (on the submitting thread,
// which is where the external correlation and name stacks are), stamped by
// whichever thread executes the work, and published to the buffer by the last
// of the two to finish.

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

#include "runtime/runtime_internal.h"

namespace emu {

std::atomic<bool> g_trace_enabled{false};

struct TraceRecord {
  emuActivityRecord data{};
  std::string name;              // owned copy of the launch name
  std::atomic<int> pending{2};   // the call's return and the work's end
};

namespace {

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

int32_t thread_id() {
  thread_local const int32_t tid = static_cast<int32_t>(syscall(SYS_gettid));
  return tid;
}

thread_local std::vector<uint64_t> t_correlations;
thread_local std::vector<const char*> t_names;
std::atomic<uint64_t> g_next_correlation{1};

// Completed records, oldest first. Leaked on purpose (used until exit).
struct Buffer {
  std::mutex mu;
  std::vector<TraceRecord*> done;
};
Buffer& buffer() {
  static Buffer* const b = new Buffer;
  return *b;
}

void finish_part(TraceRecord* r) {
  if (r->pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  Buffer& b = buffer();
  std::lock_guard<std::mutex> lock(b.mu);
  b.done.push_back(r);
}

void clear_locked(Buffer& b) {
  for (TraceRecord* r : b.done) delete r;
  b.done.clear();
}

} // namespace

// LITERALINCLUDE START: TRACE_SUBMIT
TraceRecord* trace_submit(emuActivityKind kind, int device, uint64_t stream,
                          emuMemcpyKind copy_kind, size_t bytes) {
  auto* r = new TraceRecord;
  emuActivityRecord& d = r->data;
  d.kind = kind;
  d.device = device;
  d.stream = stream;
  d.correlation = g_next_correlation.fetch_add(1, std::memory_order_relaxed);
  d.external_correlation = t_correlations.empty() ? 0 : t_correlations.back();
  d.api_thread = thread_id();
  d.api_start_ns = now_ns();
  d.copy_kind = copy_kind;
  d.bytes = bytes;
  if (kind == emuActivityKindKernel) r->name = t_names.empty() ? "emuKernel" : t_names.back();
  return r;
}

void trace_submitted(TraceRecord* r, bool queued) {
  r->data.api_end_ns = now_ns();
  if (!queued) finish_part(r);  // stands in for the work that will not run
  finish_part(r);
}

void trace_work_begin(TraceRecord* r) { r->data.start_ns = now_ns(); }

void trace_work_end(TraceRecord* r) {
  r->data.end_ns = now_ns();
  finish_part(r);
}
// LITERALINCLUDE END: TRACE_SUBMIT

} // namespace emu

extern "C" {

emuError_t emuTraceEnable(void) {
  emu::Buffer& b = emu::buffer();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    emu::clear_locked(b);
  }
  emu::g_trace_enabled.store(true, std::memory_order_relaxed);
  return emuSuccess;
}

emuError_t emuTraceDisable(void) {
  emu::g_trace_enabled.store(false, std::memory_order_relaxed);
  return emuSuccess;
}

int emuTraceEnabled(void) {
  return emu::g_trace_enabled.load(std::memory_order_relaxed) ? 1 : 0;
}

int64_t emuTraceTimestamp(void) {
  return emu::now_ns();
}

emuError_t emuTracePushExternalCorrelation(uint64_t id) {
  emu::t_correlations.push_back(id);
  return emuSuccess;
}

emuError_t emuTracePopExternalCorrelation(void) {
  if (!emu::t_correlations.empty()) emu::t_correlations.pop_back();
  return emuSuccess;
}

emuError_t emuTracePushName(const char* name) {
  if (name == nullptr) return emu::set_error(emuErrorInvalidValue, "emuTracePushName: name is null");
  emu::t_names.push_back(name);
  return emuSuccess;
}

emuError_t emuTracePopName(void) {
  if (!emu::t_names.empty()) emu::t_names.pop_back();
  return emuSuccess;
}

emuError_t emuTraceFlush(emuActivityFn_t fn, void* user_data) {
  if (fn == nullptr) return emu::set_error(emuErrorInvalidValue, "emuTraceFlush: fn is null");
  std::vector<emu::TraceRecord*> done;
  {
    emu::Buffer& b = emu::buffer();
    std::lock_guard<std::mutex> lock(b.mu);
    done.swap(b.done);
  }
  for (emu::TraceRecord* r : done) {
    if (r->data.kind == emuActivityKindKernel) r->data.name = r->name.c_str();
    fn(&r->data, user_data);
    delete r;
  }
  return emuSuccess;
}

} // extern "C"
