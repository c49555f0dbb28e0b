// Events: recording on a stream, waiting on another, querying, synchronising
// and timing. A record is a work item of its stream (streams_internal.h); it
// completes when everything submitted before it has finished.

#include <algorithm>
#include <chrono>
#include <mutex>

#include "runtime/streams_internal.h"

namespace emu {

namespace {

emuError_t check_event(const char* call, const emuEvent* e) {
  if (e == nullptr || e->magic != kEventMagic) {
    return set_error(emuErrorInvalidResourceHandle, "%s: invalid event handle %p", call,
                     static_cast<const void*>(e));
  }
  return emuSuccess;
}

} // namespace

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

void retain_event(emuEvent_t event) { retain(event); }
void release_event(emuEvent_t event) { release(event); }

} // namespace emu

// The native runtime's event calls (plugin.cpp makes them the API).
namespace emu::native {

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
