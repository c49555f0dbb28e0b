// Standalone test of the emu runtime C API (csrc/runtime). Build:
//   python scripts/build_runtime.py --programs test_runtime   (build/runtime/release/bin/test_runtime)
// Run without arguments: exits 0 when every check passes, otherwise prints the
// failing check and exits 1. `test_runtime info` prints the configuration the
// runtime derived from the environment, and `test_runtime exit` returns from
// main with busy streams (both used by tests/test_runtime_native.py).
// `test_runtime ipc-receive ...` is the receiving process of test_ipc().

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/emu_runtime.h"
#include "runtime/emu_runtime_ipc.h"
#include "runtime/emu_runtime_trace.h"

namespace {

const char* g_section = "startup";

#define CHECK(cond)                                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "CHECK failed at %s:%d in [%s]: %s\n  last error message: %s\n", \
                   __FILE__, __LINE__, g_section, #cond, emuGetLastErrorMessage());          \
      std::fflush(stderr);                                                                   \
      _exit(1);                                                                              \
    }                                                                                        \
  } while (0)

#define CHECK_ERR(expr, code)                                                                  \
  do {                                                                                         \
    const emuError_t got_ = (expr);                                                            \
    if (got_ != (code)) {                                                                      \
      std::fprintf(stderr, "CHECK failed at %s:%d in [%s]: %s returned %s, expected %s\n"      \
                           "  last error message: %s\n",                                       \
                   __FILE__, __LINE__, g_section, #expr, emuGetErrorName(got_),                \
                   emuGetErrorName(code), emuGetLastErrorMessage());                           \
      std::fflush(stderr);                                                                     \
      _exit(1);                                                                                \
    }                                                                                          \
  } while (0)

#define CHECK_OK(expr) CHECK_ERR(expr, emuSuccess)

bool contains(const char* haystack, const char* needle) {
  return std::strstr(haystack, needle) != nullptr;
}

#define CHECK_MSG(needle) CHECK(contains(emuGetLastErrorMessage(), needle))

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A hang must not go unnoticed: report the section and die.
void on_alarm(int) {
  const char prefix[] = "test_runtime: timed out in section ";
  ssize_t r = write(2, prefix, sizeof(prefix) - 1);
  r = write(2, g_section, std::strlen(g_section));
  r = write(2, "\n", 1);
  (void)r;
  _exit(2);
}

// Runs `fn` in a forked child and returns its exit status (or 100 + signal).
template <typename Fn>
int in_child(Fn fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) _exit(fn());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

void set_env(const char* count, const char* memory, const char* strict) {
  auto set = [](const char* name, const char* value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  };
  set("TORCH_EMU_DEVICE_COUNT", count);
  set("TORCH_EMU_DEVICE_MEMORY", memory);
  set("TORCH_EMU_STRICT", strict);
}

int count_threads() {
  int n = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
    closedir(dir);
  }
  return n;
}

// ---- kernels and host functions used below ----

void host_sleep_20(void*) { sleep_ms(20); }

// Keeps stream `s` busy for `ms` milliseconds without blocking this thread.
// Work submitted to an idle stream runs inline on the submitting thread, so
// another thread submits the sleeping host function; work this thread submits
// meanwhile is queued behind it and runs on the stream's worker.
class Busy {
 public:
  Busy(emuStream_t s, int ms) : ms_(ms) {
    thread_ = std::thread([this, s] {
      if (emuLaunchHostFunc(s, sleep_fn, this) != emuSuccess) started_ = true;
    });
    const double deadline = now_ms() + 10000;
    while (!started_ && now_ms() < deadline) std::this_thread::yield();
    CHECK(started_);
  }
  ~Busy() { thread_.join(); }

 private:
  static void sleep_fn(void* p) {
    auto* self = static_cast<Busy*>(p);
    self->started_ = true;
    sleep_ms(self->ms_);
  }
  int ms_;
  std::atomic<bool> started_{false};
  std::thread thread_;
};

struct WriteValue {
  int* device_ptr;
  int value;
};
int kernel_write_value(void* p) {
  auto* w = static_cast<WriteValue*>(p);
  *w->device_ptr = w->value;
  return 0;
}
int kernel_fail(void*) { return 7; }
int kernel_record_thread(void* p) {
  *static_cast<std::thread::id*>(p) = std::this_thread::get_id();
  return 0;
}

// ---- configuration, in children that never initialised the runtime ----

// Returns 0 when the runtime, started with the given environment, reports
// `count` devices of `capacity` bytes, or fails to start with a message
// containing `error` (when error != nullptr).
int config_case(const char* count, const char* memory, const char* strict, int want_count,
                size_t want_capacity, int want_strict, const char* error) {
  return in_child([=] {
    set_env(count, memory, strict);
    int n = 0;
    const emuError_t err = emuGetDeviceCount(&n);
    if (error != nullptr) {
      if (err != emuErrorInitializationError || !contains(emuGetLastErrorMessage(), error)) return 1;
      // Every call fails, not just the first one.
      void* p = nullptr;
      if (emuMalloc(&p, 16) != emuErrorInitializationError) return 2;
      if (!contains(emuGetLastErrorMessage(), error)) return 3;
      return 0;
    }
    if (err != emuSuccess || n != want_count) return 4;
    emuDeviceProp prop;
    if (emuGetDeviceProperties(&prop, n - 1) != emuSuccess) return 5;
    if (prop.totalGlobalMem != want_capacity) return 6;
    size_t free_bytes = 0, total = 0;
    if (emuMemGetInfo(0, &free_bytes, &total) != emuSuccess || total != want_capacity) return 7;
    if (emuStrictMode() != want_strict) return 8;
    return 0;
  });
}

void test_config() {
  g_section = "config";
  const size_t GiB = size_t{1} << 30, MiB = size_t{1} << 20;
  CHECK(config_case(nullptr, nullptr, nullptr, 2, 8 * GiB, 0, nullptr) == 0);
  CHECK(config_case("1", "512MiB", "0", 1, 512 * MiB, 0, nullptr) == 0);
  CHECK(config_case("16", "8G", nullptr, 16, 8 * GiB, 0, nullptr) == 0);
  CHECK(config_case("3", "4096", nullptr, 3, 4096, 0, nullptr) == 0);
  CHECK(config_case("2", "1k", nullptr, 2, 4096, 0, nullptr) == 0);  // rounded up to a page
  CHECK(config_case("2", "64kb", nullptr, 2, 64 * 1024, 0, nullptr) == 0);
  CHECK(config_case("2", "2mB", nullptr, 2, 2 * MiB, 0, nullptr) == 0);
  CHECK(config_case("2", "1.5GiB", nullptr, 2, 3 * GiB / 2, 0, nullptr) == 0);
  CHECK(config_case("2", "1T", nullptr, 2, 1024 * GiB, 0, nullptr) == 0);
  CHECK(config_case("2", "16MiB", "1", 2, 16 * MiB, 1, nullptr) == 0);
  CHECK(config_case("abc", nullptr, nullptr, 0, 0, 0,
                    "TORCH_EMU_DEVICE_COUNT='abc' is not a device count between 1 and 16") == 0);
  CHECK(config_case("0", nullptr, nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_COUNT='0'") == 0);
  CHECK(config_case("17", nullptr, nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_COUNT='17'") == 0);
  CHECK(config_case("-1", nullptr, nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_COUNT='-1'") == 0);
  CHECK(config_case("2", "12X", nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_MEMORY='12X'") == 0);
  CHECK(config_case("2", "GiB", nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_MEMORY='GiB'") == 0);
  CHECK(config_case("2", "0", nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_MEMORY='0'") == 0);
  CHECK(config_case("2", "-5M", nullptr, 0, 0, 0, "TORCH_EMU_DEVICE_MEMORY='-5M'") == 0);
  CHECK(config_case("2", "1M", "maybe", 0, 0, 0, "TORCH_EMU_STRICT='maybe'") == 0);
}

// ---- errors and devices ----

void test_errors_and_devices() {
  g_section = "errors and devices";
  CHECK(std::strcmp(emuGetErrorName(emuErrorMemoryAllocation), "emuErrorMemoryAllocation") == 0);
  CHECK(std::strcmp(emuGetErrorString(emuErrorMemoryAllocation), "out of memory") == 0);
  CHECK(std::strcmp(emuGetErrorName(emuSuccess), "emuSuccess") == 0);
  CHECK(std::strcmp(emuGetErrorName(emuErrorLaunchFailure), "emuErrorLaunchFailure") == 0);
  CHECK(std::strlen(emuGetErrorString(emuErrorNotReady)) > 0);
  CHECK(std::strlen(emuGetErrorName(static_cast<emuError_t>(99))) > 0);

  int count = 0, device = -1;
  CHECK_OK(emuGetDeviceCount(&count));
  CHECK(count == 2);
  CHECK_OK(emuGetDevice(&device));
  CHECK(device == 0);
  CHECK_ERR(emuSetDevice(5), emuErrorInvalidDevice);
  CHECK(std::strcmp(emuGetLastErrorMessage(),
                    "emuSetDevice: invalid device index 5 (there are 2 emu devices)") == 0);
  CHECK_ERR(emuSetDevice(-1), emuErrorInvalidDevice);
  CHECK_ERR(emuGetDeviceCount(nullptr), emuErrorInvalidValue);
  CHECK_ERR(emuGetDevice(nullptr), emuErrorInvalidValue);

  // The current device is per thread.
  CHECK_OK(emuSetDevice(1));
  int other_thread_device = -1;
  std::thread([&] { emuGetDevice(&other_thread_device); }).join();
  CHECK(other_thread_device == 0);
  CHECK_OK(emuGetDevice(&device));
  CHECK(device == 1);
  CHECK_OK(emuSetDevice(0));

  // The last error message is per thread too.
  std::string message_in_thread;
  std::thread([&] {
    emuSetDevice(9);
    message_in_thread = emuGetLastErrorMessage();
  }).join();
  CHECK(contains(message_in_thread.c_str(), "invalid device index 9"));
  CHECK(!contains(emuGetLastErrorMessage(), "index 9"));

  emuDeviceProp prop;
  CHECK_OK(emuGetDeviceProperties(&prop, 1));
  CHECK(std::strcmp(prop.name, "emu (emulated accelerator)") == 0);
  CHECK(prop.totalGlobalMem == (size_t{64} << 20));
  CHECK(prop.major == 1 && prop.minor == 0);
  CHECK(prop.multiProcessorCount == static_cast<int>(std::thread::hardware_concurrency()));
  CHECK_ERR(emuGetDeviceProperties(&prop, 2), emuErrorInvalidDevice);
  CHECK_MSG("emuGetDeviceProperties: invalid device index 2 (there are 2 emu devices)");
  CHECK_ERR(emuGetDeviceProperties(nullptr, 0), emuErrorInvalidValue);
  CHECK_ERR(emuDeviceSynchronize(2), emuErrorInvalidDevice);
  CHECK(emuStrictMode() == 0);

  int least = 5, greatest = 5;
  CHECK_OK(emuDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(least == 0 && greatest == -1);
  CHECK_ERR(emuDeviceGetStreamPriorityRange(nullptr, &greatest), emuErrorInvalidValue);
}

// ---- device memory ----

void test_device_memory() {
  g_section = "device memory";
  const size_t MiB = size_t{1} << 20, capacity = 64 * MiB;
  size_t free_bytes = 0, total = 0;
  CHECK_OK(emuMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == capacity && total == capacity);
  CHECK_ERR(emuMemGetInfo(3, &free_bytes, &total), emuErrorInvalidDevice);
  CHECK_ERR(emuMemGetInfo(0, nullptr, &total), emuErrorInvalidValue);

  void* p = reinterpret_cast<void*>(1);
  CHECK_OK(emuMalloc(&p, 0));
  CHECK(p == nullptr);
  CHECK_ERR(emuMalloc(nullptr, 16), emuErrorInvalidValue);

  void* a = nullptr;
  CHECK_OK(emuMalloc(&a, 1000));
  CHECK(a != nullptr && reinterpret_cast<uintptr_t>(a) % 4096 == 0);
  CHECK_OK(emuMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == capacity - 4096);

  // Out of memory: the message has the sizes.
  void* big = nullptr;
  void* x = nullptr;
  CHECK_OK(emuMalloc(&x, 1536 * 1024 - 100));
  CHECK_ERR(emuMalloc(&big, 128 * MiB), emuErrorMemoryAllocation);
  CHECK(big == nullptr);
  CHECK(std::strcmp(emuGetLastErrorMessage(),
                    "emuMalloc: out of memory on emu:0: tried to allocate 128.00 MiB with 62.50 MiB "
                    "free of 64.00 MiB capacity") == 0);
  CHECK_OK(emuFree(x));
  CHECK_ERR(emuMalloc(&big, SIZE_MAX), emuErrorMemoryAllocation);

  // Reuse: a freed hole is handed out again; neighbours coalesce.
  void *b = nullptr, *c = nullptr, *d = nullptr, *e = nullptr;
  CHECK_OK(emuMalloc(&b, MiB));
  CHECK_OK(emuMalloc(&c, MiB));
  CHECK_OK(emuMalloc(&d, MiB));
  CHECK(b != c && c != d);
  std::memset(c, 0xab, MiB);
  CHECK_OK(emuFree(c));
  CHECK_OK(emuMalloc(&e, MiB));
  CHECK(e == c);
  // Freed pages went back to the OS: the new owner sees zeros.
  CHECK(static_cast<unsigned char*>(e)[0] == 0 && static_cast<unsigned char*>(e)[MiB - 1] == 0);
  CHECK_OK(emuFree(e));

  // Frees: bad, interior, double, null.
  int host_var = 0;
  CHECK_ERR(emuFree(&host_var), emuErrorInvalidDevicePointer);
  CHECK_MSG("is not emu device memory");
  CHECK_ERR(emuFree(static_cast<char*>(b) + 4096), emuErrorInvalidDevicePointer);
  CHECK_MSG("is not the start of a live allocation on emu:0");
  CHECK_OK(emuFree(b));
  CHECK_ERR(emuFree(b), emuErrorInvalidDevicePointer);
  CHECK_OK(emuFree(nullptr));
  CHECK_OK(emuFree(d));
  CHECK_OK(emuFree(a));
  CHECK_OK(emuMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == capacity);

  // After everything coalesced, the whole capacity is one block again.
  void* all = nullptr;
  CHECK_OK(emuMalloc(&all, capacity));
  CHECK_OK(emuMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == 0);
  CHECK_ERR(emuMalloc(&big, 1), emuErrorMemoryAllocation);
  CHECK_MSG("with 0 bytes free of 64.00 MiB capacity");
  // Touch it all, free it: the pages are no longer resident.
  std::memset(all, 1, capacity);
  CHECK_OK(emuFree(all));
  std::vector<unsigned char> residency(capacity / 4096);
  CHECK(mincore(all, capacity, residency.data()) == 0);
  size_t resident = 0;
  for (unsigned char r : residency) resident += r & 1;
  CHECK(resident == 0);

  // Fragmentation is reported as such.
  std::vector<void*> blocks(64);
  for (auto& blk : blocks) CHECK_OK(emuMalloc(&blk, MiB));
  for (size_t i = 0; i < blocks.size(); i += 2) CHECK_OK(emuFree(blocks[i]));
  CHECK_ERR(emuMalloc(&big, 2 * MiB), emuErrorMemoryAllocation);
  CHECK_MSG("the largest free block is 1.00 MiB");
  for (size_t i = 1; i < blocks.size(); i += 2) CHECK_OK(emuFree(blocks[i]));

  // Device 1 has its own arena; the current device decides where memory goes.
  CHECK_OK(emuSetDevice(1));
  void* on1 = nullptr;
  CHECK_OK(emuMalloc(&on1, 3 * MiB));
  CHECK_OK(emuSetDevice(0));
  CHECK_OK(emuMemGetInfo(1, &free_bytes, &total));
  CHECK(free_bytes == capacity - 3 * MiB);
  CHECK_OK(emuMemGetInfo(0, &free_bytes, &total));
  CHECK(free_bytes == capacity);
  emuPointerAttributes attr;
  CHECK_OK(emuPointerGetAttributes(&attr, static_cast<char*>(on1) + 12345));
  CHECK(attr.type == emuMemoryTypeDevice && attr.device == 1);
  CHECK_OK(emuFree(on1));  // freeing does not depend on the current device

  // Many threads allocating and freeing at once.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      emuSetDevice(t % 2);
      for (int i = 0; i < 300; ++i) {
        void* q = nullptr;
        if (emuMalloc(&q, 4096 * (1 + (i + t) % 5)) != emuSuccess) { ++failures; continue; }
        static_cast<char*>(q)[0] = 1;
        if (emuFree(q) != emuSuccess) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  for (int dev = 0; dev < 2; ++dev) {
    CHECK_OK(emuMemGetInfo(dev, &free_bytes, &total));
    CHECK(free_bytes == capacity);
  }
}

void test_pinned_and_attributes() {
  g_section = "pinned memory and pointer attributes";
  void* pinned = nullptr;
  CHECK_OK(emuMallocHost(&pinned, 10000));
  CHECK(pinned != nullptr && reinterpret_cast<uintptr_t>(pinned) % 4096 == 0);
  std::memset(pinned, 7, 10000);
  emuPointerAttributes attr;
  CHECK_OK(emuPointerGetAttributes(&attr, static_cast<char*>(pinned) + 9999));
  CHECK(attr.type == emuMemoryTypeHost && attr.device == -1);

  int stack_var = 0;
  CHECK_OK(emuPointerGetAttributes(&attr, &stack_var));
  CHECK(attr.type == emuMemoryTypeUnregistered && attr.device == -1);
  CHECK_OK(emuPointerGetAttributes(&attr, nullptr));
  CHECK(attr.type == emuMemoryTypeUnregistered && attr.device == -1);
  std::vector<char> heap(100);
  CHECK_OK(emuPointerGetAttributes(&attr, heap.data()));
  CHECK(attr.type == emuMemoryTypeUnregistered);
  CHECK_ERR(emuPointerGetAttributes(nullptr, &stack_var), emuErrorInvalidValue);

  void* dev = nullptr;
  CHECK_OK(emuMalloc(&dev, 8192));
  CHECK_OK(emuPointerGetAttributes(&attr, static_cast<char*>(dev) + 8000));
  CHECK(attr.type == emuMemoryTypeDevice && attr.device == 0);
  CHECK_OK(emuFree(dev));

  CHECK_ERR(emuFreeHost(&stack_var), emuErrorInvalidValue);
  CHECK_ERR(emuFreeHost(static_cast<char*>(pinned) + 4096), emuErrorInvalidValue);
  CHECK_OK(emuFreeHost(pinned));
  CHECK_ERR(emuFreeHost(pinned), emuErrorInvalidValue);
  CHECK_OK(emuFreeHost(nullptr));
  void* zero = reinterpret_cast<void*>(1);
  CHECK_OK(emuMallocHost(&zero, 0));
  CHECK(zero == nullptr);
  CHECK_ERR(emuMallocHost(nullptr, 16), emuErrorInvalidValue);
}

// ---- copies ----

void test_memcpy_sync() {
  g_section = "synchronous memcpy";
  const size_t n = 100000;
  std::vector<unsigned char> src(n), dst(n);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 31 + 7);
  void *d0 = nullptr, *d0b = nullptr, *d1 = nullptr;
  CHECK_OK(emuMalloc(&d0, n));
  CHECK_OK(emuMalloc(&d0b, n));
  CHECK_OK(emuSetDevice(1));
  CHECK_OK(emuMalloc(&d1, n));
  CHECK_OK(emuSetDevice(0));

  CHECK_OK(emuMemcpy(d0, src.data(), n, emuMemcpyHostToDevice));
  CHECK_OK(emuMemcpy(d0b, d0, n, emuMemcpyDeviceToDevice));
  CHECK_OK(emuMemcpy(d1, d0b, n, emuMemcpyDeviceToDevice));  // peer
  CHECK_OK(emuMemcpy(dst.data(), d1, n, emuMemcpyDeviceToHost));
  CHECK(dst == src);
  std::vector<unsigned char> dst2(n);
  CHECK_OK(emuMemcpy(dst2.data(), dst.data(), n, emuMemcpyHostToHost));
  CHECK(dst2 == src);

  // Pointers that do not match the kind.
  CHECK_ERR(emuMemcpy(dst.data(), src.data(), n, emuMemcpyHostToDevice), emuErrorInvalidValue);
  CHECK_MSG("emuMemcpy: HostToDevice destination");
  CHECK_MSG("is not emu device memory");
  CHECK_ERR(emuMemcpy(d0, d1, n, emuMemcpyHostToDevice), emuErrorInvalidValue);
  CHECK_MSG("HostToDevice source");
  CHECK_ERR(emuMemcpy(dst.data(), src.data(), n, emuMemcpyDeviceToHost), emuErrorInvalidValue);
  CHECK_MSG("DeviceToHost source");
  CHECK_ERR(emuMemcpy(d0, src.data(), n, emuMemcpyDeviceToDevice), emuErrorInvalidValue);
  CHECK_ERR(emuMemcpy(d0, src.data(), n, emuMemcpyHostToHost), emuErrorInvalidValue);
  CHECK_MSG("HostToHost destination");
  CHECK_ERR(emuMemcpy(d0, src.data(), n, static_cast<emuMemcpyKind>(9)), emuErrorInvalidValue);
  CHECK_ERR(emuMemcpy(nullptr, src.data(), n, emuMemcpyHostToHost), emuErrorInvalidValue);
  // A range running past the end of the arena.
  CHECK_ERR(emuMemcpy(d0, src.data(), (size_t{64} << 20) + 1, emuMemcpyHostToDevice),
            emuErrorInvalidValue);
  CHECK_MSG("runs past the end of emu:0's memory");
  // n == 0 is a no-op whatever the pointers.
  CHECK_OK(emuMemcpy(nullptr, nullptr, 0, emuMemcpyHostToDevice));

  CHECK_OK(emuFree(d0));
  CHECK_OK(emuFree(d0b));
  CHECK_OK(emuFree(d1));
}

void test_memcpy_async() {
  g_section = "asynchronous memcpy";
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  int* dev = nullptr;
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&dev), 4096));
  int* dev1 = nullptr;
  CHECK_OK(emuSetDevice(1));
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&dev1), 4096));
  CHECK_OK(emuSetDevice(0));

  // Pageable destination: complete when the call returns, in stream order
  // (after the sleeping host function and the kernel queued behind it).
  WriteValue write{dev, 1234};
  int pageable = 0;
  {
    Busy busy(s, 50);
    CHECK_OK(emuLaunchKernel(s, kernel_write_value, &write));
    CHECK_OK(emuMemcpyAsync(&pageable, dev, sizeof(int), emuMemcpyDeviceToHost, s));
    CHECK(pageable == 1234);
  }

  // Pageable source: the caller may overwrite it right after the call.
  int value = 77;
  {
    Busy busy(s, 20);
    CHECK_OK(emuMemcpyAsync(dev, &value, sizeof(int), emuMemcpyHostToDevice, s));
    value = -1;
  }
  CHECK_OK(emuStreamSynchronize(s));
  CHECK_OK(emuMemcpy(&pageable, dev, sizeof(int), emuMemcpyDeviceToHost));
  CHECK(pageable == 77);

  // Pinned: truly asynchronous.
  int* pinned = nullptr;
  CHECK_OK(emuMallocHost(reinterpret_cast<void**>(&pinned), 4096));
  pinned[0] = 0;
  write.value = 4321;
  {
    Busy busy(s, 50);
    CHECK_OK(emuLaunchKernel(s, kernel_write_value, &write));
    CHECK_OK(emuMemcpyAsync(pinned, dev, sizeof(int), emuMemcpyDeviceToHost, s));
    CHECK_ERR(emuStreamQuery(s), emuErrorNotReady);
    CHECK(pinned[0] == 0);
    CHECK_OK(emuStreamSynchronize(s));
  }
  CHECK(pinned[0] == 4321);
  CHECK_OK(emuStreamQuery(s));

  // Pinned -> device, device -> device (peer), pinned <-> pinned, queued
  // behind other work.
  pinned[1] = 99;
  Busy busy(s, 20);
  CHECK_OK(emuMemcpyAsync(dev + 1, pinned + 1, sizeof(int), emuMemcpyHostToDevice, s));
  CHECK_OK(emuMemcpyAsync(dev1, dev, 2 * sizeof(int), emuMemcpyDeviceToDevice, s));
  CHECK_OK(emuMemcpyAsync(pinned + 2, dev1, 2 * sizeof(int), emuMemcpyDeviceToHost, s));
  CHECK_OK(emuMemcpyAsync(pinned + 4, pinned + 2, 2 * sizeof(int), emuMemcpyHostToHost, s));
  int host_copy[2] = {0, 0};
  CHECK_OK(emuMemcpyAsync(host_copy, pinned + 4, 2 * sizeof(int), emuMemcpyHostToHost, s));
  CHECK(host_copy[0] == 4321 && host_copy[1] == 99);  // pageable destination: already done
  CHECK_OK(emuStreamSynchronize(s));
  CHECK(pinned[2] == 4321 && pinned[3] == 99);

  // Validation applies to async copies as well.
  CHECK_ERR(emuMemcpyAsync(pinned, pinned + 1, sizeof(int), emuMemcpyHostToDevice, s),
            emuErrorInvalidValue);
  CHECK_MSG("emuMemcpyAsync: HostToDevice destination");
  CHECK_MSG("is not emu device memory");
  CHECK_ERR(emuMemcpyAsync(dev, dev, 4, emuMemcpyHostToHost, s), emuErrorInvalidValue);
  CHECK_ERR(emuMemcpyAsync(dev, dev, 4, emuMemcpyDeviceToDevice, nullptr),
            emuErrorInvalidResourceHandle);
  CHECK_OK(emuMemcpyAsync(nullptr, nullptr, 0, emuMemcpyDeviceToDevice, s));

  CHECK_OK(emuFreeHost(pinned));
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuFree(dev1));
  CHECK_OK(emuStreamDestroy(s));
}

// ---- streams and events ----

void test_stream_basics() {
  g_section = "stream basics";
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, -5));
  int priority = 0, device = -1;
  CHECK_OK(emuStreamGetPriority(s, &priority));
  CHECK(priority == -1);
  CHECK_OK(emuStreamGetDevice(s, &device));
  CHECK(device == 0);
  emuStream_t low = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&low, 3));
  CHECK_OK(emuStreamGetPriority(low, &priority));
  CHECK(priority == 0);
  CHECK_OK(emuSetDevice(1));
  emuStream_t on1 = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&on1, 0));
  CHECK_OK(emuSetDevice(0));
  CHECK_OK(emuStreamGetDevice(on1, &device));
  CHECK(device == 1);

  // Work on the high-priority stream runs on its worker, in order.
  std::vector<int> order;
  struct Push {
    std::vector<int>* order;
    int value;
  };
  Push pushes[3] = {{&order, 1}, {&order, 2}, {&order, 3}};
  auto push = [](void* p) {
    auto* push = static_cast<Push*>(p);
    push->order->push_back(push->value);
  };
  {
    Busy busy(s, 20);
    for (auto& p : pushes) CHECK_OK(emuLaunchHostFunc(s, push, &p));
    CHECK_ERR(emuStreamQuery(s), emuErrorNotReady);
    CHECK_OK(emuStreamSynchronize(s));
  }
  CHECK((order == std::vector<int>{1, 2, 3}));
  CHECK_OK(emuStreamQuery(s));

  // An idle stream runs a kernel on the calling thread (the fast path).
  std::thread::id ran_on;
  CHECK_OK(emuLaunchKernel(low, kernel_record_thread, &ran_on));
  CHECK(ran_on == std::this_thread::get_id());

  // emuDeviceSynchronize(1) waits for the streams of device 1.
  {
    Busy busy(on1, 50);
    CHECK_ERR(emuStreamQuery(on1), emuErrorNotReady);
    CHECK_OK(emuDeviceSynchronize(1));
    CHECK_OK(emuStreamQuery(on1));
  }

  // Destroy drains first.
  std::atomic<bool> done{false};
  {
    Busy busy(low, 30);
    CHECK_OK(emuLaunchHostFunc(low, [](void* p) { *static_cast<std::atomic<bool>*>(p) = true; }, &done));
    CHECK_OK(emuStreamDestroy(low));
    CHECK(done);
  }

  CHECK_OK(emuStreamDestroy(s));
  CHECK_OK(emuStreamDestroy(on1));
}

void test_stream_ordering_with_events() {
  g_section = "cross-stream ordering with events";
  emuStream_t a = nullptr, b = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&a, 0));
  CHECK_OK(emuStreamCreateWithPriority(&b, 0));
  emuEvent_t ev = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&ev, emuEventDisableTiming));
  int* dev = nullptr;
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&dev), 4096));
  int* pinned = nullptr;
  CHECK_OK(emuMallocHost(reinterpret_cast<void**>(&pinned), 4096));
  pinned[0] = 0;

  WriteValue write{dev, 42};
  {
    Busy busy(a, 50);
    CHECK_OK(emuLaunchKernel(a, kernel_write_value, &write));
    CHECK_OK(emuEventRecord(ev, a));
    CHECK_ERR(emuEventQuery(ev), emuErrorNotReady);
    CHECK_OK(emuStreamWaitEvent(b, ev));
    CHECK_OK(emuMemcpyAsync(pinned, dev, sizeof(int), emuMemcpyDeviceToHost, b));
    CHECK_OK(emuStreamSynchronize(b));
    CHECK(pinned[0] == 42);
    CHECK_OK(emuEventQuery(ev));
  }

  // The same with a pageable destination: the call itself waits.
  write.value = 43;
  int pageable = 0;
  {
    Busy busy(a, 50);
    CHECK_OK(emuLaunchKernel(a, kernel_write_value, &write));
    CHECK_OK(emuEventRecord(ev, a));
    CHECK_OK(emuStreamWaitEvent(b, ev));
    CHECK_OK(emuMemcpyAsync(&pageable, dev, sizeof(int), emuMemcpyDeviceToHost, b));
    CHECK(pageable == 43);
  }

  // Waiting on a never-recorded or completed event is a no-op.
  emuEvent_t fresh = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&fresh, emuEventDefault));
  CHECK_OK(emuStreamWaitEvent(b, fresh));
  CHECK_OK(emuStreamQuery(b));
  CHECK_OK(emuStreamWaitEvent(b, ev));
  CHECK_OK(emuStreamQuery(b));
  CHECK_OK(emuEventDestroy(fresh));

  CHECK_OK(emuEventDestroy(ev));
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuFreeHost(pinned));
  CHECK_OK(emuStreamDestroy(a));
  CHECK_OK(emuStreamDestroy(b));
}

void test_events() {
  g_section = "events";
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  emuEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&start, emuEventDefault));
  CHECK_OK(emuEventCreateWithFlags(&end, emuEventDefault));
  CHECK_OK(emuEventCreateWithFlags(&untimed, emuEventDisableTiming));
  emuEvent_t bad = nullptr;
  CHECK_ERR(emuEventCreateWithFlags(&bad, 1), emuErrorInvalidValue);
  CHECK_ERR(emuEventCreateWithFlags(&bad, 4), emuErrorInvalidValue);
  CHECK_ERR(emuEventCreateWithFlags(nullptr, 0), emuErrorInvalidValue);

  // Never recorded: complete, but no elapsed time.
  CHECK_OK(emuEventQuery(start));
  CHECK_OK(emuEventSynchronize(start));
  float ms = -1;
  CHECK_ERR(emuEventElapsedTime(&ms, start, end), emuErrorNotReady);

  // Recording on an idle stream completes at once.
  CHECK_OK(emuEventRecord(start, s));
  CHECK_OK(emuEventQuery(start));
  {
    Busy busy(s, 30);
    CHECK_OK(emuEventRecord(end, s));
    CHECK_ERR(emuEventQuery(end), emuErrorNotReady);
    CHECK_ERR(emuEventElapsedTime(&ms, start, end), emuErrorNotReady);
    const double before = now_ms();
    CHECK_OK(emuEventSynchronize(end));
    CHECK(now_ms() - before > 10);  // it did wait
  }
  CHECK_OK(emuEventQuery(end));
  CHECK_OK(emuEventElapsedTime(&ms, start, end));
  CHECK(ms >= 29.9f && ms < 5000);
  CHECK_ERR(emuEventElapsedTime(nullptr, start, end), emuErrorInvalidValue);

  CHECK_OK(emuEventRecord(untimed, s));
  CHECK_OK(emuEventSynchronize(untimed));
  CHECK_ERR(emuEventElapsedTime(&ms, start, untimed), emuErrorInvalidResourceHandle);
  CHECK_MSG("event was created with timing disabled");

  // Re-recording: queries follow the latest record.
  {
    Busy busy(s, 20);
    CHECK_OK(emuEventRecord(start, s));
    CHECK_ERR(emuEventQuery(start), emuErrorNotReady);
    CHECK_OK(emuStreamSynchronize(s));
    CHECK_OK(emuEventQuery(start));
  }

  // Destroying an event whose record is still queued is safe.
  emuEvent_t doomed = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&doomed, emuEventDefault));
  emuStream_t other = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&other, 0));
  {
    Busy busy(s, 20);
    CHECK_OK(emuEventRecord(doomed, s));
    CHECK_OK(emuStreamWaitEvent(other, doomed));
    CHECK_ERR(emuStreamQuery(other), emuErrorNotReady);
    CHECK_OK(emuEventDestroy(doomed));
    CHECK_OK(emuStreamSynchronize(other));
    CHECK_OK(emuStreamSynchronize(s));
  }
  CHECK_OK(emuStreamDestroy(other));

  // One event recorded on two streams: it follows the latest record.
  emuStream_t s2 = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s2, 0));
  emuEvent_t shared = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&shared, emuEventDefault));
  {
    Busy busy(s, 50);
    CHECK_OK(emuEventRecord(shared, s));  // version 1: pending
    CHECK_ERR(emuEventQuery(shared), emuErrorNotReady);
    CHECK_OK(emuEventRecord(shared, s2));  // version 2: completes at once
    CHECK_OK(emuEventQuery(shared));
    CHECK_OK(emuStreamSynchronize(s));
  }
  CHECK_OK(emuEventDestroy(shared));
  CHECK_OK(emuStreamDestroy(s2));

  CHECK_OK(emuEventDestroy(start));
  CHECK_OK(emuEventDestroy(end));
  CHECK_OK(emuEventDestroy(untimed));
  CHECK_OK(emuStreamDestroy(s));
}

void test_kernel_failures() {
  g_section = "kernel failures";
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  // Inline: reported by the launch itself, and not afterwards.
  CHECK_ERR(emuLaunchKernel(s, kernel_fail, nullptr), emuErrorLaunchFailure);
  CHECK_MSG("emuLaunchKernel: the kernel returned 7 on emu:0");
  CHECK_OK(emuStreamSynchronize(s));
  // On the worker: reported once by the next synchronize.
  {
    Busy busy(s, 20);
    CHECK_OK(emuLaunchKernel(s, kernel_fail, nullptr));
    CHECK_ERR(emuStreamSynchronize(s), emuErrorLaunchFailure);
    CHECK_MSG("emuStreamSynchronize");
    CHECK_MSG("returned 7");
    CHECK_OK(emuStreamSynchronize(s));
  }
  // ... or by the next query.
  {
    Busy busy(s, 20);
    CHECK_OK(emuLaunchKernel(s, kernel_fail, nullptr));
    const double deadline = now_ms() + 10000;
    emuError_t q;
    while ((q = emuStreamQuery(s)) == emuErrorNotReady && now_ms() < deadline) sleep_ms(1);
    CHECK(q == emuErrorLaunchFailure);
    CHECK_OK(emuStreamQuery(s));
  }
  CHECK_OK(emuStreamDestroy(s));
}

struct SyncFromInside {
  emuStream_t stream;
  emuStream_t other;
  emuEvent_t event;
  int* dev;
  std::atomic<int> steps{0};
};

int kernel_that_synchronises(void* p) {
  auto* ctx = static_cast<SyncFromInside*>(p);
  int value = 5;
  if (emuStreamSynchronize(ctx->stream) != emuSuccess) return 1;
  ctx->steps++;
  if (emuDeviceSynchronize(0) != emuSuccess) return 2;
  ctx->steps++;
  if (emuMemcpy(ctx->dev, &value, sizeof(int), emuMemcpyHostToDevice) != emuSuccess) return 3;
  ctx->steps++;
  int back = 0;
  if (emuMemcpyAsync(&back, ctx->dev, sizeof(int), emuMemcpyDeviceToHost, ctx->stream) != emuSuccess ||
      back != 5) {
    return 4;
  }
  ctx->steps++;
  // An event recorded on this stream behind us: nothing before us is pending.
  if (emuEventRecord(ctx->event, ctx->stream) != emuSuccess) return 5;
  if (emuEventSynchronize(ctx->event) != emuSuccess) return 6;
  ctx->steps++;
  // Work queued on another stream from inside a kernel, then waited for.
  if (emuLaunchHostFunc(ctx->other, host_sleep_20, nullptr) != emuSuccess) return 7;
  if (emuStreamSynchronize(ctx->other) != emuSuccess) return 8;
  if (emuStreamQuery(ctx->stream) != emuErrorNotReady) return 9;  // we are running
  ctx->steps++;
  return 0;
}

void test_sync_from_inside() {
  g_section = "synchronising from inside launched work";
  SyncFromInside ctx;
  CHECK_OK(emuStreamCreateWithPriority(&ctx.stream, 0));
  CHECK_OK(emuStreamCreateWithPriority(&ctx.other, 0));
  CHECK_OK(emuEventCreateWithFlags(&ctx.event, emuEventDefault));
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&ctx.dev), 4096));
  // Inline (idle stream).
  CHECK_OK(emuLaunchKernel(ctx.stream, kernel_that_synchronises, &ctx));
  CHECK(ctx.steps == 6);
  // On the worker (stream busy), with more work queued behind it.
  {
    Busy busy(ctx.stream, 20);
    CHECK_OK(emuLaunchKernel(ctx.stream, kernel_that_synchronises, &ctx));
    CHECK_OK(emuLaunchHostFunc(ctx.stream, host_sleep_20, nullptr));
    CHECK_OK(emuStreamSynchronize(ctx.stream));
    CHECK(ctx.steps == 12);
  }
  // The kernel queued an event record of its own; let it finish so that the
  // next launch finds the stream idle and runs inline.
  CHECK_OK(emuStreamSynchronize(ctx.stream));
  // A stream cannot be destroyed from its own work (it would join itself).
  struct Ctx {
    emuStream_t s;
    emuError_t result;
  } destroy_ctx{ctx.stream, emuSuccess};
  CHECK_OK(emuLaunchHostFunc(ctx.stream, [](void* p) {
    auto* c = static_cast<Ctx*>(p);
    c->result = emuStreamDestroy(c->s);
  }, &destroy_ctx));
  CHECK(destroy_ctx.result == emuErrorInvalidValue);
  CHECK_OK(emuFree(ctx.dev));
  CHECK_OK(emuEventDestroy(ctx.event));
  CHECK_OK(emuStreamDestroy(ctx.stream));
  CHECK_OK(emuStreamDestroy(ctx.other));
}

struct Shared {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  long counter = 0;  // deliberately not atomic: a stream runs one item at a time
  int last_seen[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  std::atomic<int> order_violations{0};
};
struct Launch {
  Shared* shared;
  int thread;
  int index;
};
int kernel_count(void* p) {
  auto* l = static_cast<Launch*>(p);
  Shared* sh = l->shared;
  if (sh->inside.fetch_add(1) != 0) sh->overlaps++;
  sh->counter++;
  if (sh->last_seen[l->thread] + 1 != l->index) sh->order_violations++;
  sh->last_seen[l->thread] = l->index;
  sh->inside.fetch_sub(1);
  return 0;
}

void test_concurrent_submitters() {
  g_section = "many threads submitting concurrently";
  const int kThreads = 8, kLaunches = 2000;
  emuStream_t shared_stream = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&shared_stream, 0));
  Shared shared;
  std::vector<std::vector<Launch>> launches(kThreads);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    launches[t].resize(kLaunches);
    threads.emplace_back([&, t] {
      emuStream_t own = nullptr;
      if (emuStreamCreateWithPriority(&own, t % 2 ? -1 : 0) != emuSuccess) { ++errors; return; }
      emuEvent_t ev = nullptr;
      emuEventCreateWithFlags(&ev, emuEventDisableTiming);
      for (int i = 0; i < kLaunches; ++i) {
        launches[t][i] = {&shared, t, i};
        // Inline onto an idle stream (a lock-free claim) racing with queued
        // launches and with the worker's items: neither may overlap or reorder.
        const auto launch = i % 3 == 0 ? emuLaunchKernelAsync : emuLaunchKernel;
        if (launch(shared_stream, kernel_count, &launches[t][i]) != emuSuccess) ++errors;
        if (i % 250 == 0) {
          const emuError_t busy = emuStreamQuery(shared_stream);
          if (busy != emuSuccess && busy != emuErrorNotReady) ++errors;
        }
        if (i % 100 == 0) {
          // Mix in cross-stream traffic.
          if (emuEventRecord(ev, shared_stream) != emuSuccess) ++errors;
          if (emuStreamWaitEvent(own, ev) != emuSuccess) ++errors;
          if (emuLaunchHostFunc(own, [](void*) {}, nullptr) != emuSuccess) ++errors;
        }
      }
      if (emuStreamSynchronize(own) != emuSuccess) ++errors;
      if (emuStreamSynchronize(shared_stream) != emuSuccess) ++errors;
      emuEventDestroy(ev);
      if (emuStreamDestroy(own) != emuSuccess) ++errors;
    });
  }
  for (auto& th : threads) th.join();
  CHECK_OK(emuStreamSynchronize(shared_stream));
  CHECK(errors == 0);
  CHECK(shared.overlaps == 0);
  CHECK(shared.order_violations == 0);
  CHECK(shared.counter == long{kThreads} * kLaunches);
  CHECK_OK(emuStreamDestroy(shared_stream));
}

void test_no_thread_leak() {
  g_section = "stream workers are joined";
  const int threads_before = count_threads();
  for (int i = 0; i < 50; ++i) {
    emuStream_t s = nullptr;
    CHECK_OK(emuStreamCreateWithPriority(&s, -1));
    CHECK_OK(emuLaunchHostFunc(s, host_sleep_20, nullptr));  // runs inline
    CHECK_OK(emuLaunchHostFunc(s, [](void*) {}, nullptr));
    CHECK_OK(emuStreamDestroy(s));
  }
  // Queue from another thread while one is inline, so workers get created.
  for (int i = 0; i < 20; ++i) {
    emuStream_t s = nullptr;
    CHECK_OK(emuStreamCreateWithPriority(&s, 0));
    std::thread t([s] { emuLaunchHostFunc(s, host_sleep_20, nullptr); });
    sleep_ms(2);
    CHECK_OK(emuLaunchHostFunc(s, [](void*) {}, nullptr));
    t.join();
    CHECK_OK(emuStreamDestroy(s));
  }
  CHECK(count_threads() == threads_before);
}

void test_invalid_handles() {
  g_section = "invalid handles and arguments";
  CHECK_ERR(emuStreamCreateWithPriority(nullptr, 0), emuErrorInvalidValue);
  CHECK_ERR(emuStreamDestroy(nullptr), emuErrorInvalidResourceHandle);
  CHECK_MSG("emuStreamDestroy: invalid stream handle");
  int value = 0;
  CHECK_ERR(emuStreamGetDevice(nullptr, &value), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamGetPriority(nullptr, &value), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamQuery(nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamSynchronize(nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuLaunchHostFunc(nullptr, host_sleep_20, nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuLaunchKernel(nullptr, kernel_fail, nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuEventDestroy(nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuEventQuery(nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuEventSynchronize(nullptr), emuErrorInvalidResourceHandle);
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  emuEvent_t e = nullptr;
  CHECK_OK(emuEventCreateWithFlags(&e, 0));
  CHECK_ERR(emuEventRecord(nullptr, s), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuEventRecord(e, nullptr), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamWaitEvent(nullptr, e), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamWaitEvent(s, nullptr), emuErrorInvalidResourceHandle);
  float ms = 0;
  CHECK_ERR(emuEventElapsedTime(&ms, nullptr, e), emuErrorInvalidResourceHandle);
  CHECK_ERR(emuStreamGetDevice(s, nullptr), emuErrorInvalidValue);
  CHECK_ERR(emuStreamGetPriority(s, nullptr), emuErrorInvalidValue);
  CHECK_ERR(emuLaunchHostFunc(s, nullptr, nullptr), emuErrorInvalidValue);
  CHECK_ERR(emuLaunchKernel(s, nullptr, nullptr), emuErrorInvalidValue);
  CHECK_OK(emuEventDestroy(e));
  CHECK_OK(emuStreamDestroy(s));
}

void test_fork() {
  g_section = "fork after initialisation";
  const int status = in_child([] {
    int n = 0;
    if (emuGetDeviceCount(&n) != emuErrorInitializationError) return 1;
    if (!contains(emuGetLastErrorMessage(),
                  "emu runtime was initialised in the parent process before fork(); the child "
                  "cannot use it. Use the 'spawn' start method for multiprocessing")) {
      return 2;
    }
    void* p = nullptr;
    if (emuMalloc(&p, 16) != emuErrorInitializationError) return 3;
    emuStream_t s = nullptr;
    if (emuStreamCreateWithPriority(&s, 0) != emuErrorInitializationError) return 4;
    if (std::strcmp(emuGetErrorName(emuErrorInitializationError), "emuErrorInitializationError") != 0)
      return 5;
    return 0;
  });
  CHECK(status == 0);
  // The parent is unaffected.
  int n = 0;
  CHECK_OK(emuGetDeviceCount(&n));
}

// ---- IPC (emu_runtime_ipc.h) ----

constexpr int kIpcInts = 3 * 1024;  // three pages

// The receiving process of test_ipc: exec'ed, so it is not a forked child of
// an initialised runtime. `expect` is "ok" or "no-device" (run with 1 device).
int ipc_receive(const char* hex, const char* expect) {
  if (std::strcmp(expect, "no-device") == 0) setenv("TORCH_EMU_DEVICE_COUNT", "1", 1);
  emuIpcMemHandle_t handle;
  for (size_t i = 0; i < sizeof(handle.reserved); ++i) {
    unsigned byte = 0;
    CHECK(std::sscanf(hex + 2 * i, "%2x", &byte) == 1);
    handle.reserved[i] = static_cast<char>(byte);
  }
  void* p = nullptr;
  if (std::strcmp(expect, "no-device") == 0) {
    CHECK_ERR(emuIpcOpenMemHandle(&p, handle, 0), emuErrorInvalidDevice);
    CHECK_MSG("the memory is on emu:1");
    CHECK_MSG("this process has 1 emu device(s)");
    return 0;
  }
  CHECK_ERR(emuIpcOpenMemHandle(&p, handle, 2), emuErrorInvalidValue);
  CHECK_OK(emuIpcOpenMemHandle(&p, handle, emuIpcMemLazyEnablePeerAccess));
  void* again = nullptr;
  CHECK_OK(emuIpcOpenMemHandle(&again, handle, 0));
  CHECK(again == p);
  emuPointerAttributes attr{};
  CHECK_OK(emuPointerGetAttributes(&attr, static_cast<char*>(p) + 100));
  CHECK(attr.type == emuMemoryTypeDevice && attr.device == 1);
  size_t free_bytes = 0, total = 0;
  CHECK_OK(emuMemGetInfo(1, &free_bytes, &total));
  CHECK(total - free_bytes == kIpcInts * sizeof(int));  // the mapped range is in use here

  std::vector<int> data(kIpcInts);
  CHECK_OK(emuMemcpy(data.data(), p, kIpcInts * sizeof(int), emuMemcpyDeviceToHost));
  for (int i = 0; i < kIpcInts; ++i) CHECK(data[i] == i);
  for (int i = 0; i < kIpcInts; ++i) data[i] = -i;
  CHECK_OK(emuMemcpy(p, data.data(), kIpcInts * sizeof(int), emuMemcpyHostToDevice));

  CHECK_ERR(emuFree(p), emuErrorInvalidDevicePointer);
  CHECK_MSG("close it with emuIpcCloseMemHandle");
  CHECK_OK(emuIpcCloseMemHandle(p));
  CHECK_OK(emuIpcCloseMemHandle(p));  // one close per open
  CHECK_ERR(emuIpcCloseMemHandle(p), emuErrorInvalidDevicePointer);
  CHECK_OK(emuMemGetInfo(1, &free_bytes, &total));
  CHECK(free_bytes == total);
  return 0;
}

int run_ipc_receiver(const char* hex, const char* expect) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "test_runtime", "ipc-receive", hex, expect, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

void test_ipc() {
  g_section = "ipc";
  CHECK_OK(emuSetDevice(1));
  std::vector<int> data(kIpcInts);
  for (int i = 0; i < kIpcInts; ++i) data[i] = i;
  void* p = nullptr;
  CHECK_OK(emuMalloc(&p, kIpcInts * sizeof(int)));
  CHECK_OK(emuMemcpy(p, data.data(), kIpcInts * sizeof(int), emuMemcpyHostToDevice));

  void* base = nullptr;
  size_t size = 0;
  CHECK_OK(emuMemGetAddressRange(&base, &size, static_cast<char*>(p) + 5000));
  CHECK(base == p && size == kIpcInts * sizeof(int));
  CHECK_ERR(emuMemGetAddressRange(&base, &size, data.data()), emuErrorInvalidDevicePointer);

  emuIpcMemHandle_t handle;
  CHECK_ERR(emuIpcGetMemHandle(&handle, static_cast<char*>(p) + 4096), emuErrorInvalidDevicePointer);
  CHECK_OK(emuIpcGetMemHandle(&handle, p));
  void* q = nullptr;
  CHECK_ERR(emuIpcOpenMemHandle(&q, handle, 0), emuErrorInvalidValue);
  CHECK_MSG("made by this process");
  emuIpcMemHandle_t junk{};
  CHECK_ERR(emuIpcOpenMemHandle(&q, junk, 0), emuErrorInvalidValue);
  CHECK_ERR(emuIpcCloseMemHandle(p), emuErrorInvalidDevicePointer);

  char hex[2 * sizeof(handle.reserved) + 1];
  for (size_t i = 0; i < sizeof(handle.reserved); ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(handle.reserved[i]));
  }
  CHECK(run_ipc_receiver(hex, "ok") == 0);
  // What the receiver wrote is in our memory.
  CHECK_OK(emuMemcpy(data.data(), p, kIpcInts * sizeof(int), emuMemcpyDeviceToHost));
  for (int i = 0; i < kIpcInts; ++i) CHECK(data[i] == -i);
  CHECK(run_ipc_receiver(hex, "no-device") == 0);
  CHECK_OK(emuFree(p));
  CHECK_OK(emuSetDevice(0));
}

int print_info() {
  int count = 0;
  const emuError_t err = emuGetDeviceCount(&count);
  if (err != emuSuccess) {
    std::printf("error=%s\nmessage=%s\n", emuGetErrorName(err), emuGetLastErrorMessage());
    return 0;
  }
  emuDeviceProp prop;
  emuGetDeviceProperties(&prop, 0);
  std::printf("count=%d\ncapacity=%zu\nstrict=%d\n", count, prop.totalGlobalMem, emuStrictMode());
  return 0;
}

// Returns from main with streams that still have seconds of work queued (one
// worker blocked waiting for an event): the process must exit promptly.
int exit_with_live_streams() {
  set_env("2", "64MiB", nullptr);
  emuStream_t busy = nullptr, blocked = nullptr, idle = nullptr;
  emuEvent_t never = nullptr;
  if (emuStreamCreateWithPriority(&busy, 0) || emuStreamCreateWithPriority(&blocked, -1) ||
      emuStreamCreateWithPriority(&idle, 0) || emuEventCreateWithFlags(&never, 0)) {
    return 1;
  }
  static Busy* keep_busy = new Busy(busy, 200);  // leaked: its thread outlives main
  for (int i = 0; i < 100; ++i) emuLaunchHostFunc(busy, host_sleep_20, nullptr);
  emuEventRecord(never, busy);
  emuStreamWaitEvent(blocked, never);
  emuLaunchHostFunc(blocked, host_sleep_20, nullptr);
  (void)keep_busy;
  std::printf("exiting\n");
  return 0;
}

} // namespace

// Activity tracing (emu_runtime_trace.h): one record per kernel and copy
// submitted while enabled, with the submitter's correlation id and name, for
// inline and worker-run work alike; nothing while disabled.
void collect_record(const emuActivityRecord* r, void* out) {
  auto* records = static_cast<std::vector<std::pair<emuActivityRecord, std::string>>*>(out);
  records->push_back({*r, r->name != nullptr ? r->name : ""});
}

void test_activity_trace() {
  g_section = "activity trace";
  using Records = std::vector<std::pair<emuActivityRecord, std::string>>;
  emuStream_t s = nullptr;
  CHECK_OK(emuStreamCreateWithPriority(&s, 0));
  uint64_t stream_id = 0;
  CHECK_OK(emuStreamGetId(s, &stream_id));
  CHECK(stream_id > 0);
  int* dev = nullptr;
  CHECK_OK(emuMalloc(reinterpret_cast<void**>(&dev), 64));
  int host[16] = {};
  WriteValue w{dev, 5};

  Records records;
  CHECK_OK(emuLaunchKernel(s, kernel_write_value, &w));  // disabled: not recorded
  CHECK(emuTraceEnabled() == 0);
  CHECK_OK(emuTraceEnable());
  CHECK(emuTraceEnabled() == 1);
  const int64_t t0 = emuTraceTimestamp();
  CHECK_OK(emuTracePushExternalCorrelation(41));
  CHECK_OK(emuTracePushName("outer"));
  CHECK_OK(emuTracePushName("my_kernel"));
  CHECK_OK(emuLaunchKernel(s, kernel_write_value, &w));  // inline
  CHECK_OK(emuTracePopName());
  {
    Busy busy(s, 20);
    CHECK_OK(emuMemcpyAsync(host, dev, sizeof(host), emuMemcpyDeviceToHost, s));  // pageable: waits
    CHECK_OK(emuLaunchKernel(s, kernel_write_value, &w));                         // on the worker
  }
  CHECK_OK(emuStreamSynchronize(s));
  CHECK_OK(emuTracePopName());
  CHECK_OK(emuTracePopExternalCorrelation());
  CHECK_OK(emuTracePopExternalCorrelation());  // empty: a no-op
  CHECK_OK(emuTracePopName());
  CHECK_ERR(emuTracePushName(nullptr), emuErrorInvalidValue);
  CHECK_OK(emuTraceDisable());
  CHECK_OK(emuLaunchKernel(s, kernel_write_value, &w));  // disabled again
  const int64_t t1 = emuTraceTimestamp();
  CHECK_OK(emuTraceFlush(collect_record, &records));

  CHECK(records.size() == 3);
  const char* names[] = {"my_kernel", "", "outer"};
  const emuActivityKind kinds[] = {emuActivityKindKernel, emuActivityKindMemcpy, emuActivityKindKernel};
  for (size_t i = 0; i < records.size(); ++i) {
    const emuActivityRecord& r = records[i].first;
    CHECK(r.kind == kinds[i] && records[i].second == names[i]);
    CHECK(r.device == 0 && r.stream == stream_id && r.external_correlation == 41);
    CHECK(r.api_thread == static_cast<int32_t>(gettid()));
    CHECK(t0 <= r.api_start_ns && r.api_start_ns <= r.api_end_ns && r.api_end_ns <= t1);
    CHECK(t0 <= r.start_ns && r.start_ns <= r.end_ns && r.end_ns <= t1);
    CHECK(i == 0 || r.correlation > records[i - 1].first.correlation);
  }
  CHECK(records[1].first.copy_kind == emuMemcpyDeviceToHost && records[1].first.bytes == sizeof(host));
  CHECK(records[1].first.api_start_ns < records[1].first.start_ns);  // queued behind the busy stream
  records.clear();
  CHECK_OK(emuTraceFlush(collect_record, &records));  // flushed records are forgotten
  CHECK(records.empty());
  CHECK_ERR(emuTraceFlush(nullptr, nullptr), emuErrorInvalidValue);
  CHECK_OK(emuFree(dev));
  CHECK_OK(emuStreamDestroy(s));
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "info") == 0) return print_info();
  if (argc > 1 && std::strcmp(argv[1], "exit") == 0) return exit_with_live_streams();
  if (argc > 3 && std::strcmp(argv[1], "ipc-receive") == 0) return ipc_receive(argv[2], argv[3]);

  signal(SIGALRM, on_alarm);
  alarm(100);

  // Children that never saw the runtime initialised use it normally.
  test_config();

  set_env("2", "64MiB", nullptr);
  test_errors_and_devices();
  test_device_memory();
  test_pinned_and_attributes();
  test_memcpy_sync();
  test_memcpy_async();
  test_stream_basics();
  test_stream_ordering_with_events();
  test_events();
  test_kernel_failures();
  test_sync_from_inside();
  test_concurrent_submitters();
  test_no_thread_leak();
  test_invalid_handles();
  test_ipc();
  test_activity_trace();
  test_fork();

  std::printf("all runtime checks passed\n");
  return 0;
}
