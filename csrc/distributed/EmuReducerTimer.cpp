// DDP's reducer times every sampled iteration (forward, backward compute,
// gradient communication and their overlap: the runtime stats of
// DistributedDataParallel._get_ddp_logging_data() and of DDP's usage logging)
// with a c10d::Timer that it looks up by the device type of the module. With no
// timer for PrivateUse1 those stats stay 0 for emu modules.
//
// Emu kernels run on streams, queued unless small and onto an idle stream, so
// the host clock at one of the reducer's events says when the work before it
// was issued, not when it ran. As on CUDA, each event is therefore also
// recorded on the device's current stream, and a difference is the time
// between the two device events.

#include <array>

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace {

// LITERALINCLUDE START: DIST_REDUCER_TIMER
class EmuReducerTimer final : public c10d::Timer {
 public:
  explicit EmuReducerTimer(c10::Device device) : device_(device) {}

  void record(Event event) override {
    Timer::record(event); // the host time, which the reducer reports too
    const c10::impl::VirtualGuardImpl guard(device_.type());
    device_event(event).record(guard.getStream(device_));
  }

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    c10::Event& from = device_event(start);
    c10::Event& to = device_event(end);
    if (!from.was_marked_for_recording() || !to.was_marked_for_recording()) {
      return std::nullopt; // the event did not happen
    }
    from.synchronize();
    to.synchronize();
    const double milliseconds = from.elapsedTime(to);
    // Out of order: the end was recorded in an earlier iteration.
    if (milliseconds < 0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(milliseconds * 1e6);
  }

 private:
  c10::Event& device_event(Event event) {
    return events_.at(static_cast<size_t>(event));
  }

  static c10::Event timing_event() {
    return c10::Event(c10::kPrivateUse1, c10::EventFlag::BACKEND_DEFAULT); // timing enabled
  }

  c10::Device device_;
  std::array<c10::Event, 5> events_{timing_event(), timing_event(), timing_event(), timing_event(),
                                    timing_event()};
};
// LITERALINCLUDE END: DIST_REDUCER_TIMER

} // namespace

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, EmuReducerTimer);
} // namespace c10d
