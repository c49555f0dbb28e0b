// What went through the fallback: for vendors hunting the kernels they still
// need to write. Off by default; the fallback then pays one relaxed load.
#pragma once

#include <ATen/core/operator_name.h>

#include <atomic>
#include <string>
#include <vector>

namespace torch_emu {

struct FallbackRecord {
  std::string op;
  int64_t count = 0;
  int64_t nanoseconds = 0;
};

// Recording (counts and time per operator) and error mode (every fallback
// raises NotImplementedError) are independent switches.
void set_fallback_recording(bool on);
void set_fallback_error(bool on);
// True when either switch is on (the fallback's fast check).
bool fallback_watched();
bool fallback_is_error();
void record_fallback(const c10::OperatorName& op, int64_t nanoseconds);
// The records so far, most time first; clears them.
std::vector<FallbackRecord> take_fallback_records();

// The operators whose functional/in-place forms were registered to the
// fallback directly (see FALLBACK_STRUCTURED), for the coverage report.
std::vector<std::string>& fallback_routed_ops();

} // namespace torch_emu
