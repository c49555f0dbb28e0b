// Standalone test of plugging another runtime in (emu_runtime_plugin.h). Build:
//   python scripts/build_runtime.py --programs test_plugin   (build/runtime/release/bin/test_plugin)
// Run with no argument: installs a toy runtime and checks that the API
// forwards to it; with "late": checks that installing after the native
// runtime was used is refused. Exits 0 when every check passes.

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_attributes.h"
#include "runtime/emu_runtime_faults.h"
#include "runtime/emu_runtime_plugin.h"

#include "check.h"

namespace {

// The toy runtime: three devices, a malloc that counts, everything else
// unsupported.
#define TOY_UNSUPPORTED(call, params, args) \
  emuError_t toy_##call params {            \
    emuRuntimeSetErrorMessage(#call ": the toy runtime does not do this"); \
    return emuErrorNotSupported;            \
  }
EMU_RUNTIME_CALLS(TOY_UNSUPPORTED)
#undef TOY_UNSUPPORTED

int g_mallocs = 0;
char g_memory[64];

emuError_t toy_count(int* count) {
  *count = 3;
  return emuSuccess;
}

emuError_t toy_malloc(void** ptr, size_t) {
  ++g_mallocs;
  *ptr = g_memory;
  return emuSuccess;
}

emuRuntimeTable toy_table() {
  emuRuntimeTable table = {
      "toy",
#define TOY_ENTRY(call, params, args) &toy_##call,
      EMU_RUNTIME_CALLS(TOY_ENTRY)
#undef TOY_ENTRY
  };
  table.emuGetDeviceCount = &toy_count;
  table.emuMalloc = &toy_malloc;
  return table;
}

void check_install() {
  CHECK(emuRuntimeInstall(nullptr) == emuErrorInvalidValue);
  static emuRuntimeTable incomplete = toy_table();
  incomplete.emuEventQuery = nullptr;
  CHECK(emuRuntimeInstall(&incomplete) == emuErrorInvalidValue);
  CHECK(contains(emuGetLastErrorMessage(), "leaves emuEventQuery unset"));
  CHECK(std::strcmp(emuRuntimeName(), "native") == 0);

  static const emuRuntimeTable toy = toy_table();
  CHECK(emuRuntimeInstall(&toy) == emuSuccess);
  CHECK(std::strcmp(emuRuntimeName(), "toy") == 0);
  CHECK(emuRuntimeInstall(&toy) == emuErrorInitializationError);

  // The API is the toy's now.
  int count = 0;
  CHECK(emuGetDeviceCount(&count) == emuSuccess && count == 3);
  void* ptr = nullptr;
  CHECK(emuMalloc(&ptr, 16) == emuSuccess && ptr == g_memory && g_mallocs == 1);
  CHECK(emuStreamSynchronize(nullptr) == emuErrorNotSupported);
  CHECK(contains(emuGetLastErrorMessage(), "toy runtime does not do this"));
  // Attributes come from the host, for the toy's devices.
  int warp = 0;
  CHECK(emuDeviceGetAttribute(&warp, emuDevAttrWarpSize, 2) == emuSuccess && warp == 1);
  CHECK(emuDeviceGetAttribute(&warp, emuDevAttrWarpSize, 3) == emuErrorInvalidDevice);
  CHECK(emuRuntimeCheckDevice("toyCall", 2) == emuSuccess);
  CHECK(emuRuntimeCheckDevice("toyCall", 3) == emuErrorInvalidDevice);
  CHECK(contains(emuGetLastErrorMessage(), "toyCall: invalid device index 3 (there are 3 emu devices)"));
  // The native runtime's own extensions say whose they are.
  const emuFaultSpec spec{emuFaultOutOfMemory, -1, 0, 1, 0, nullptr};
  int id = 0;
  CHECK(emuFaultInject(&spec, &id) == emuErrorNotSupported);
  CHECK(contains(emuGetLastErrorMessage(), "not provided by the 'toy' runtime"));
  CHECK(emuStrictMode() == 0);
}

void check_late_install() {
  int count = 0;
  CHECK(emuGetDeviceCount(&count) == emuSuccess && count == 2);  // the native runtime, initialised
  static const emuRuntimeTable toy = toy_table();
  CHECK(emuRuntimeInstall(&toy) == emuErrorInitializationError);
  CHECK(contains(emuGetLastErrorMessage(), "the native runtime is already in use"));
  CHECK(std::strcmp(emuRuntimeName(), "native") == 0);
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "late") == 0) {
    check_late_install();
  } else {
    check_install();
  }
  std::printf("all plugin checks passed\n");
  return 0;
}
