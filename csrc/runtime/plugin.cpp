// The runtime API's entry points: each forwards to the installed runtime's
// table (emu_runtime_plugin.h). The native runtime is installed unless another
// was installed first; this file is the only place that knows there is a
// choice.

#include <atomic>
#include <mutex>

#include "runtime/emu_runtime_plugin.h"
#include "runtime/runtime_internal.h"

namespace emu {
namespace {

// LITERALINCLUDE START: RUNTIME_DISPATCH
const emuRuntimeTable kNativeRuntime = {
    "native",
#define EMU_NATIVE_ENTRY(name, params, args) &native::name,
    EMU_RUNTIME_CALLS(EMU_NATIVE_ENTRY)
#undef EMU_NATIVE_ENTRY
};

std::atomic<const emuRuntimeTable*> g_runtime{&kNativeRuntime};

} // namespace

bool plugged_runtime() {
  return g_runtime.load(std::memory_order_acquire) != &kNativeRuntime;
}

} // namespace emu

extern "C" {

#define EMU_FORWARD(name, params, args) \
  emuError_t name params { return emu::g_runtime.load(std::memory_order_acquire)->name args; }
EMU_RUNTIME_CALLS(EMU_FORWARD)
#undef EMU_FORWARD
// LITERALINCLUDE END: RUNTIME_DISPATCH

int emuStrictMode(void) {
  return emu::plugged_runtime() ? 0 : emu::native::emuStrictMode();
}

emuError_t emuRuntimeInstall(const emuRuntimeTable* table) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (table == nullptr || table->name == nullptr) {
    return emu::set_error(emuErrorInvalidValue, "emuRuntimeInstall: table or its name is null");
  }
#define EMU_CHECK_ENTRY(call, params, args)                                                          \
  if (table->call == nullptr) {                                                                      \
    return emu::set_error(emuErrorInvalidValue, "emuRuntimeInstall: runtime '%s' leaves " #call " unset", \
                          table->name);                                                              \
  }
  EMU_RUNTIME_CALLS(EMU_CHECK_ENTRY)
#undef EMU_CHECK_ENTRY
  if (emu::plugged_runtime()) {
    return emu::set_error(emuErrorInitializationError, "emuRuntimeInstall: the '%s' runtime is already installed",
                          emuRuntimeName());
  }
  if (emu::g_init_state.load(std::memory_order_acquire) != emu::kUninitialised) {
    return emu::set_error(emuErrorInitializationError,
                          "emuRuntimeInstall: the native runtime is already in use; install '%s' before "
                          "the first use of an emu device",
                          table->name);
  }
  emu::g_runtime.store(table, std::memory_order_release);
  return emuSuccess;
}

const char* emuRuntimeName(void) {
  return emu::g_runtime.load(std::memory_order_acquire)->name;
}

} // extern "C"
