// Standalone test of the runtime's stream capture (emu_runtime_graphs.h). Build:
//   python scripts/build_runtime.py --programs test_graphs   (build/runtime/release/bin/test_graphs)
// Exits 0 when every check passes (run by tests/test_graphs.py).

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_graphs.h"

#define CHECK_ERR(expr, code)                                                                   \
  do {                                                                                          \
    const emuError_t got_ = (expr);                                                             \
    if (got_ != (code)) {                                                                       \
      std::fprintf(stderr, "CHECK failed at line %d: %s returned %s, expected %s (%s)\n",       \
                   __LINE__, #expr, emuGetErrorName(got_), emuGetErrorName(code),               \
                   emuGetLastErrorMessage());                                                   \
      return 1;                                                                                 \
    }                                                                                           \
  } while (0)
#define CHECK_OK(expr) CHECK_ERR(expr, emuSuccess)
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "CHECK failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

namespace {

int add_one(void* data) {
  auto* x = static_cast<float*>(data);
  for (int i = 0; i < 4; ++i) x[i] += 1;
  return 0;
}

void count_destroy(void* counter) {
  ++*static_cast<int*>(counter);
}

bool equals(const float* a, float b0) {
  for (int i = 0; i < 4; ++i) {
    if (a[i] != b0 + static_cast<float>(i)) return false;
  }
  return true;
}

} // namespace

int main() {
  setenv("TORCH_EMU_DEVICE_COUNT", "1", 1);
  setenv("TORCH_EMU_DEVICE_MEMORY", "64MiB", 1);
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  float host[4] = {1, 2, 3, 4};
  float* dev = nullptr;
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&dev), sizeof(host)));
  CHECK_OK(emuMemcpy(dev, host, sizeof(host), emuMemcpyHostToDevice));

  // Capture a kernel and a copy: they run once, are recorded, then rolled back.
  float* scratch = nullptr;
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&scratch), sizeof(host)));
  CHECK_OK(emuStreamBeginCapture(s));
  emuStreamCaptureStatus status = emuStreamCaptureStatusNone;
  CHECK_OK(emuStreamIsCapturing(s, &status));
  CHECK(status == emuStreamCaptureStatusActive);
  CHECK_ERR(emuStreamBeginCapture(s), emuErrorInvalidValue);
  CHECK_OK(emuLaunchKernel(s, &add_one, dev));
  CHECK_OK(emuMemcpyAsync(scratch, dev, sizeof(host), emuMemcpyDeviceToDevice, s));
  int destroyed = 0;
  CHECK_OK(emuStreamAttachToCapture(s, &destroyed, &count_destroy));
  emuGraph_t graph = nullptr;
  CHECK_OK(emuStreamEndCapture(s, &graph));
  CHECK(graph != nullptr);
  size_t nodes = 0;
  CHECK_OK(emuGraphGetNodeCount(graph, &nodes));
  CHECK(nodes == 2);
  char text[64];
  CHECK_OK(emuGraphDescribeNode(graph, 1, text, sizeof(text)));
  CHECK(std::strstr(text, "memcpy DeviceToDevice 16 bytes") != nullptr);
  float out[4];
  CHECK_OK(emuMemcpy(out, dev, sizeof(out), emuMemcpyDeviceToHost));
  CHECK(equals(out, 1));  // capturing changed nothing

  // Each launch replays both nodes, in order.
  CHECK_OK(emuGraphLaunch(graph, s));
  CHECK_OK(emuGraphLaunch(graph, s));
  CHECK_OK(emuStreamSynchronize(s));
  CHECK_OK(emuMemcpy(out, dev, sizeof(out), emuMemcpyDeviceToHost));
  CHECK(equals(out, 3));
  CHECK_OK(emuMemcpy(out, scratch, sizeof(out), emuMemcpyDeviceToHost));
  CHECK(equals(out, 3));
  CHECK_OK(emuGraphDestroy(graph));
  CHECK(destroyed == 1);

  // Waiting for a capturing stream fails and invalidates the capture.
  CHECK_OK(emuStreamBeginCapture(s));
  CHECK_ERR(emuStreamSynchronize(s), emuErrorStreamCaptureUnsupported);
  CHECK(std::strstr(emuGetLastErrorMessage(), "capturing a graph") != nullptr);
  CHECK_OK(emuStreamIsCapturing(s, &status));
  CHECK(status == emuStreamCaptureStatusInvalidated);
  CHECK_ERR(emuDeviceSynchronize(0), emuErrorStreamCaptureUnsupported);
  CHECK_ERR(emuMemcpy(out, dev, sizeof(out), emuMemcpyDeviceToHost), emuErrorStreamCaptureUnsupported);
  CHECK_ERR(emuLaunchKernel(s, &add_one, dev), emuErrorStreamCaptureInvalidated);
  CHECK_ERR(emuStreamEndCapture(s, &graph), emuErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK_OK(emuStreamIsCapturing(s, &status));
  CHECK(status == emuStreamCaptureStatusNone);

  // Pageable host memory cannot be captured; ending a capture that was never begun fails.
  CHECK_OK(emuStreamBeginCapture(s));
  CHECK_ERR(emuMemcpyAsync(dev, host, sizeof(host), emuMemcpyHostToDevice, s), emuErrorStreamCaptureUnsupported);
  CHECK_ERR(emuStreamEndCapture(s, &graph), emuErrorStreamCaptureInvalidated);
  CHECK_ERR(emuStreamEndCapture(s, &graph), emuErrorInvalidValue);
  CHECK_ERR(emuGraphLaunch(nullptr, s), emuErrorInvalidResourceHandle);

  CHECK_OK(emuStreamSynchronize(s));
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuFree(scratch));
  CHECK_OK(emuStreamDestroy(s));
  std::printf("all graph checks passed\n");
  return 0;
}
