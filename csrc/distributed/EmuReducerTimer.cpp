// DDP's reducer times every sampled iteration (forward, backward compute,
// gradient communication and their overlap: the runtime stats of
// DistributedDataParallel._get_ddp_logging_data() and of DDP's usage logging)
// with a c10d::Timer that it looks up by the device type of the module. With no
// timer for PrivateUse1 those stats stay 0 for emu modules.
//
// Emu kernels have finished when their launch returns, so the host clock read
// by the reducer at each event (on the thread that launched the work) bounds
// the device work; no device events are needed.

#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace {

// LITERALINCLUDE START: DIST_REDUCER_TIMER
class EmuReducerTimer final : public c10d::Timer {
 public:
  explicit EmuReducerTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const int64_t from = getTimeRef(start);
    const int64_t to = getTimeRef(end);
    // Unset (the event did not happen this iteration) or out of order (the
    // end was recorded in an earlier iteration): no measurement.
    if (from == c10d::kUnsetTime || to == c10d::kUnsetTime || to < from) {
      return std::nullopt;
    }
    return to - from;
  }
};
// LITERALINCLUDE END: DIST_REDUCER_TIMER

} // namespace

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, EmuReducerTimer);
} // namespace c10d
