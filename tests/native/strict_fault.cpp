// Strict mode (TORCH_EMU_STRICT=1) check, driven by tests/test_runtime_native.py.
//   strict_fault host [device]  touches device memory from the host: must die
//                               by SIGSEGV with a message naming the address
//                               and the device. Prints the address first.
//   strict_fault kernel         the same accesses inside emuLaunchKernel and
//                               through the runtime's copies succeed (exit 0).
//   strict_fault other          a fault outside device memory crashes as usual
//                               (SIGSEGV, without the strict-mode message).

#include <signal.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/emu_runtime.h"

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "strict_fault: %s failed: %s\n", what, emuGetLastErrorMessage());
  return 1;
}

int kernel_fill(void* p) {
  volatile int* data = static_cast<volatile int*>(p);
  for (int i = 0; i < 1024; ++i) data[i] = i;
  return data[1023] == 1023 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  setenv("TORCH_EMU_STRICT", "1", 1);
  setenv("TORCH_EMU_DEVICE_MEMORY", "16MiB", 1);
  const char* mode = argc > 1 ? argv[1] : "host";
  if (emuStrictMode() != 1) return fail("emuStrictMode");

  if (std::strcmp(mode, "other") == 0) {
    // Not device memory: the strict-mode handler must step aside.
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::printf("%p\n", page);
    std::fflush(stdout);
    *static_cast<volatile int*>(page) = 1;
    return 3;  // not reached
  }

  if (argc > 2 && emuSetDevice(std::atoi(argv[2])) != emuSuccess) return fail("emuSetDevice");
  int* dev = nullptr;
  if (emuMalloc(reinterpret_cast<void**>(&dev), 1024 * sizeof(int)) != emuSuccess) {
    return fail("emuMalloc");
  }

  if (std::strcmp(mode, "host") == 0) {
    volatile int* target = dev + 100;
    std::printf("%p\n", static_cast<void*>(const_cast<int*>(target)));
    std::fflush(stdout);
    *target = 1;  // outside a kernel: must fault
    return 2;     // not reached
  }

  emuStream_t stream = nullptr;
  if (emuStreamCreateWithPriority(&stream, 0) != emuSuccess) return fail("emuStreamCreate");
  if (emuLaunchKernel(stream, kernel_fill, dev) != emuSuccess) return fail("emuLaunchKernel");
  int host[1024] = {0};
  if (emuMemcpy(host, dev, sizeof(host), emuMemcpyDeviceToHost) != emuSuccess) return fail("D2H");
  if (host[1000] != 1000) return fail("D2H contents");
  host[5] = -5;
  if (emuMemcpyAsync(dev, host, sizeof(host), emuMemcpyHostToDevice, stream) != emuSuccess) {
    return fail("async H2D");
  }
  int* pinned = nullptr;
  if (emuMallocHost(reinterpret_cast<void**>(&pinned), sizeof(host)) != emuSuccess) {
    return fail("emuMallocHost");
  }
  if (emuMemcpyAsync(pinned, dev, sizeof(host), emuMemcpyDeviceToHost, stream) != emuSuccess) {
    return fail("async D2H");
  }
  if (emuStreamSynchronize(stream) != emuSuccess) return fail("emuStreamSynchronize");
  if (pinned[5] != -5 || pinned[6] != 6) return fail("async contents");
  emuFreeHost(pinned);
  emuFree(dev);
  emuStreamDestroy(stream);
  std::printf("ok\n");
  return 0;
}
