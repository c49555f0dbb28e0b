// Standalone test of the runtime's device-activity and attribute APIs
// (emu_runtime_stats.h, emu_runtime_attributes.h) and of emuStreamGetDevice's
// handle validation. Build like test_runtime.cpp; exits 0 when every check
// passes. Run by tests/test_runtime_native.py.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_attributes.h"
#include "runtime/emu_runtime_stats.h"

#include "check.h"

namespace {

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

emuUtilization rates(int device) {
  emuUtilization u{};
  CHECK(emuDeviceGetUtilizationRates(device, &u) == emuSuccess);
  return u;
}

// A kernel that runs until released, so activity can be observed while it runs.
struct Gate {
  std::atomic<bool> started{false};
  std::atomic<bool> open{false};
};

int held_kernel(void* p) {
  auto* gate = static_cast<Gate*>(p);
  gate->started = true;
  while (!gate->open) sleep_ms(1);
  return 0;
}

int quick_kernel(void*) {
  return 0;
}

void test_utilization() {
  CHECK(emuUtilizationSamplePeriodMs() == 1000);
  emuStream_t a = nullptr, b = nullptr;
  CHECK(emuStreamCreateWithPriority(&a, 0) == emuSuccess);
  CHECK(emuStreamCreateWithPriority(&b, 0) == emuSuccess);
  emuUtilization idle = rates(0);
  CHECK(idle.kernel == 0 && idle.memory == 0);

  // Two kernels running at once on two streams count once (never over 100).
  Gate gate;
  std::thread first([&] { CHECK(emuLaunchKernel(a, held_kernel, &gate) == emuSuccess); });
  std::thread second([&] { CHECK(emuLaunchKernel(b, held_kernel, &gate) == emuSuccess); });
  while (!gate.started) sleep_ms(1);
  sleep_ms(50);
  const emuUtilization running = rates(0);  // counts the kernels still in progress
  CHECK(running.kernel > 0 && running.kernel <= 100 && running.memory >= running.kernel);
  CHECK(rates(1).kernel == 0);  // per device
  gate.open = true;
  first.join();
  second.join();
  const emuUtilization after = rates(0);
  CHECK(after.kernel >= running.kernel && after.memory >= after.kernel && after.memory <= 100);

  // A copy touching device memory is memory activity, not kernel activity.
  CHECK(emuSetDevice(1) == emuSuccess);
  void* dev = nullptr;
  const size_t n = size_t{64} << 20;
  CHECK(emuMalloc(&dev, n) == emuSuccess);
  void* host = nullptr;
  CHECK(emuMallocHost(&host, n) == emuSuccess);
  for (int i = 0; i < 20; ++i) CHECK(emuMemcpy(dev, host, n, emuMemcpyHostToDevice) == emuSuccess);
  const emuUtilization copies = rates(1);
  CHECK(copies.kernel == 0 && copies.memory > 0);
  CHECK(emuFree(dev) == emuSuccess);
  CHECK(emuFreeHost(host) == emuSuccess);
  CHECK(emuSetDevice(0) == emuSuccess);

  // Activity older than the sampling period no longer counts.
  CHECK(emuLaunchKernel(a, quick_kernel, nullptr) == emuSuccess);
  sleep_ms(1100);
  idle = rates(0);
  CHECK(idle.kernel == 0 && idle.memory == 0);

  emuUtilization u{};
  CHECK(emuDeviceGetUtilizationRates(7, &u) == emuErrorInvalidDevice);
  CHECK(emuDeviceGetUtilizationRates(0, nullptr) == emuErrorInvalidValue);
  CHECK(emuStreamDestroy(a) == emuSuccess);
  CHECK(emuStreamDestroy(b) == emuSuccess);
}

void test_stream_handle_validation() {
  emuStream_t s = nullptr;
  CHECK(emuSetDevice(1) == emuSuccess);
  CHECK(emuStreamCreateWithPriority(&s, 0) == emuSuccess);
  CHECK(emuSetDevice(0) == emuSuccess);
  int device = -1;
  CHECK(emuStreamGetDevice(s, &device) == emuSuccess && device == 1);
  int not_a_stream = 0;
  CHECK(emuStreamGetDevice(reinterpret_cast<emuStream_t>(&not_a_stream), &device) ==
        emuErrorInvalidResourceHandle);
  CHECK(std::strstr(emuGetLastErrorMessage(), "is not a live emu stream") != nullptr);
  CHECK(emuStreamGetDevice(reinterpret_cast<emuStream_t>(uintptr_t{12345}), &device) ==
        emuErrorInvalidResourceHandle);
  CHECK(emuStreamGetDevice(s, nullptr) == emuErrorInvalidValue);
  CHECK(emuStreamDestroy(s) == emuSuccess);
  CHECK(emuStreamGetDevice(s, &device) == emuErrorInvalidResourceHandle);
}

void test_attributes() {
  int value = -1;
  CHECK(emuDeviceGetAttribute(&value, emuDevAttrIntegrated, 0) == emuSuccess && value == 1);
  CHECK(emuDeviceGetAttribute(&value, emuDevAttrWarpSize, 1) == emuSuccess && value == 1);
  CHECK(emuDeviceGetAttribute(&value, emuDevAttrL2CacheSize, 0) == emuSuccess && value >= 0);
  CHECK(emuDeviceGetAttribute(&value, emuDevAttrSharedMemoryPerBlock, 0) == emuSuccess && value == 0);
  CHECK(emuDeviceGetAttribute(&value, static_cast<emuDeviceAttr>(99), 0) == emuErrorInvalidValue);
  CHECK(emuDeviceGetAttribute(&value, emuDevAttrWarpSize, 5) == emuErrorInvalidDevice);
  CHECK(emuDeviceGetAttribute(nullptr, emuDevAttrWarpSize, 0) == emuErrorInvalidValue);
  unsigned char u0[16], u1[16], again[16];
  CHECK(emuDeviceGetUuid(u0, 0) == emuSuccess && emuDeviceGetUuid(u1, 1) == emuSuccess);
  CHECK(emuDeviceGetUuid(again, 0) == emuSuccess);
  CHECK(std::memcmp(u0, u1, 16) != 0 && std::memcmp(u0, again, 16) == 0);
  CHECK((u0[8] & 0xc0) == 0x80);  // RFC 4122 variant
  CHECK(emuDeviceGetUuid(u0, -1) == emuErrorInvalidDevice);
}

} // namespace

int main() {
  alarm(60);  // a hang must not go unnoticed
  test_utilization();
  test_stream_handle_validation();
  test_attributes();
  std::printf("all runtime stats checks passed\n");
  return 0;
}
