// Standalone test of the runtime's injected faults (emu_runtime_faults.h) and
// performance model (emu_runtime_perf.h). Build:
//   python scripts/build_runtime.py --programs test_faults   (build/runtime/release/bin/test_faults)
// Run with TORCH_EMU_PROFILE="h2d=1GB/s,launch=2ms" (tests/test_runtime_native.py
// and scripts/sanitize.sh do): exits 0 when every check passes. Faults are
// armed and fired from several threads at once, for the sanitizers.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_faults.h"
#include "runtime/emu_runtime_perf.h"

#include "check.h"

namespace {

int fault(emuFaultKind kind, uint64_t after, uint64_t times, size_t limit = 0) {
  const emuFaultSpec spec{kind, -1, after, times, limit, nullptr};
  int id = 0;
  CHECK_OK(emuFaultInject(&spec, &id));
  return id;
}

int add_one(void* data) {
  ++*static_cast<int*>(data);
  return 0;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void test_out_of_memory() {
  const int id = fault(emuFaultOutOfMemory, 1, 1);
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(emuMalloc(&a, 4096));
  CHECK_ERR(emuMalloc(&b, 4096), emuErrorMemoryAllocation);
  CHECK(contains(emuGetLastErrorMessage(), "injected fault"));
  CHECK_OK(emuMalloc(&b, 4096));  // spent
  uint64_t hits = 0;
  CHECK_OK(emuFaultGetHits(id, &hits));
  CHECK(hits == 1);
  CHECK_OK(emuFaultRemove(id));
  CHECK_ERR(emuFaultRemove(id), emuErrorInvalidValue);

  const int limit = fault(emuFaultOutOfMemory, 0, 0, size_t{1} << 20);  // a 1 MiB device
  void* big = nullptr;
  CHECK_ERR(emuMalloc(&big, size_t{2} << 20), emuErrorMemoryAllocation);
  CHECK(contains(emuGetLastErrorMessage(), "injected limit"));
  CHECK_OK(emuMalloc(&big, 4096));
  CHECK_OK(emuFree(big));
  CHECK_OK(emuFaultRemove(limit));
  CHECK_OK(emuFree(a));
  CHECK_OK(emuFree(b));
}

void test_kernel_and_copy_faults() {
  emuStream_t stream = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&stream, 0));
  int ran = 0;
  fault(emuFaultKernel, 0, 1);
  CHECK_ERR(emuLaunchKernel(stream, add_one, &ran), emuErrorLaunchFailure);
  CHECK(contains(emuGetLastErrorMessage(), "injected fault"));
  CHECK(ran == 1);  // the kernel ran; its result is what failed
  CHECK_OK(emuLaunchKernel(stream, add_one, &ran));
  // Queued: reported once, at the next synchronisation.
  fault(emuFaultKernel, 0, 1);
  CHECK_OK(emuLaunchKernelAsync(stream, add_one, &ran));
  CHECK_ERR(emuStreamSynchronize(stream), emuErrorLaunchFailure);
  CHECK(contains(emuGetLastErrorMessage(), "injected fault"));
  CHECK_OK(emuStreamSynchronize(stream));
  CHECK(ran == 3);

  // A named fault fails only the launches of that name.
  const emuFaultSpec named{emuFaultKernel, -1, 0, 1, 0, "mul"};
  int named_id = 0;
  CHECK_OK(emuFaultInject(&named, &named_id));
  CHECK(emuFaultsArmed() == 1);
  CHECK_OK(emuFaultSetLaunchName("aten::add"));
  CHECK_OK(emuLaunchKernel(stream, add_one, &ran));
  CHECK_OK(emuFaultSetLaunchName("at::native::structured_mul_out"));
  CHECK_ERR(emuLaunchKernel(stream, add_one, &ran), emuErrorLaunchFailure);
  CHECK_OK(emuFaultSetLaunchName(nullptr));
  CHECK_OK(emuFaultRemove(named_id));
  CHECK(ran == 5);

  void* dev = nullptr;
  CHECK_OK(emuMalloc(&dev, 64));
  char host[64] = {1};
  fault(emuFaultCopy, 0, 1);
  CHECK_ERR(emuMemcpy(dev, host, sizeof(host), emuMemcpyHostToDevice), emuErrorEccUncorrectable);
  CHECK_OK(emuMemcpy(dev, host, sizeof(host), emuMemcpyHostToDevice));
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuFaultRemove(-1));
  CHECK_OK(emuStreamDestroy(stream));
}

// Faults armed, fired and removed while other threads launch and allocate.
void test_faults_under_concurrency() {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      emuStream_t stream = nullptr;
      CHECK_OK(emuStreamCreateWithPriority(&stream, 0));
      int ran = 0;
      for (int i = 0; i < 200; ++i) {
        const emuError_t launched = (i % 2 ? emuLaunchKernelAsync : emuLaunchKernel)(stream, add_one, &ran);
        CHECK(launched == emuSuccess || launched == emuErrorLaunchFailure);
        void* p = nullptr;
        if (emuMalloc(&p, 4096 * (1 + t)) == emuSuccess) CHECK_OK(emuFree(p));
        if (i % 50 == 0) {
          const emuFaultSpec spec{emuFaultKernel, -1, 3, 2, 0, nullptr};
          int id = 0;
          CHECK_OK(emuFaultInject(&spec, &id));
        }
        (void)emuStreamSynchronize(stream);
      }
      (void)emuStreamSynchronize(stream);
      CHECK(ran == 200);
      CHECK_OK(emuStreamDestroy(stream));
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK_OK(emuFaultRemove(-1));
}

void test_performance_model() {
  emuPerformanceModel model{};
  CHECK_OK(emuGetPerformanceModel(&model));
  CHECK(model.h2d_bytes_per_second == 1e9);
  CHECK(model.launch_latency_seconds == 2e-3);
  emuStream_t stream = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&stream, 0));
  const size_t bytes = size_t{4} << 20;  // 4.19 ms at 1 GB/s
  void* dev = nullptr;
  void* pinned = nullptr;
  CHECK_OK(emuMalloc(&dev, bytes));
  CHECK_OK(emuMallocHost(&pinned, bytes));
  auto start = std::chrono::steady_clock::now();
  CHECK_OK(emuMemcpyAsync(dev, pinned, bytes, emuMemcpyHostToDevice, stream));
  CHECK(emuStreamQuery(stream) == emuErrorNotReady);  // on the worker: the caller did not wait
  CHECK_OK(emuStreamSynchronize(stream));
  CHECK(ms_since(start) >= 0.95 * 4.19);
  start = std::chrono::steady_clock::now();
  int ran = 0;
  CHECK_OK(emuLaunchKernel(stream, add_one, &ran));
  CHECK(ms_since(start) >= 0.95 * 2.0);  // the launch latency
  CHECK(ran == 1);
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuFreeHost(pinned));
  CHECK_OK(emuStreamDestroy(stream));
}

// Last: the process cannot recover from it.
void test_device_lost() {
  emuStream_t stream = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&stream, 0));
  void* dev = nullptr;
  CHECK_OK(emuMalloc(&dev, 64));
  int ran = 0;
  fault(emuFaultDeviceLost, 1, 1);
  CHECK_OK(emuLaunchKernel(stream, add_one, &ran));
  CHECK_ERR(emuLaunchKernel(stream, add_one, &ran), emuErrorDeviceLost);
  CHECK(contains(emuGetLastErrorMessage(), "device was lost"));
  int count = 0;
  CHECK_ERR(emuGetDeviceCount(&count), emuErrorDeviceLost);
  void* more = nullptr;
  CHECK_ERR(emuMalloc(&more, 64), emuErrorDeviceLost);
  CHECK_OK(emuFree(dev));  // releasing still works
  CHECK_OK(emuStreamDestroy(stream));
  CHECK(ran == 1);
}

} // namespace

int main() {
  test_out_of_memory();
  test_kernel_and_copy_faults();
  test_faults_under_concurrency();
  test_performance_model();
  test_device_lost();
  std::printf("all fault and model checks passed\n");
  return 0;
}
