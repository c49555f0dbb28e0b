#include "core/EmuSyncDebug.h"

#include "core/EmuGraph.h"

#include <c10/util/Exception.h>

#include <atomic>

namespace torch_emu {
namespace {

std::atomic<int> mode{0};

} // namespace

// LITERALINCLUDE START: SYNC_DEBUG
void set_sync_debug_mode(int value) {
  TORCH_CHECK(value >= 0 && value <= 2, "invalid value of debug_mode ", value,
              ", expected one of 0 (default), 1 (warn), 2 (error)");
  mode.store(value, std::memory_order_relaxed);
}

int sync_debug_mode() {
  return mode.load(std::memory_order_relaxed);
}

void warn_or_error_on_sync(const char* operation) {
  check_not_capturing(operation); // a graph capture cannot wait for the device
  const int current = mode.load(std::memory_order_relaxed);
  if (C10_LIKELY(current == 0)) {
    return;
  }
  TORCH_CHECK(current != 2, "called a synchronizing emu operation: ", operation);
  TORCH_WARN("called a synchronizing emu operation: ", operation);
}
// LITERALINCLUDE END: SYNC_DEBUG

} // namespace torch_emu
