// Busy-time accounting behind emuDeviceGetUtilizationRates.
//
// Per device and per kind of activity (kernel, memory), the runtime keeps how
// many activities are in flight and, in a ring of short time buckets, how long
// at least one was. streams.cpp and copies.cpp bracket every kernel and every
// copy that touches device memory with an emu::ActivityScope; nested or concurrent
// activities (several streams, a kernel launching inline onto another stream)
// count once, so a percentage never exceeds 100.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>

#include "runtime/emu_runtime_stats.h"
#include "runtime/runtime_internal.h"

namespace {

constexpr int64_t kPeriodNs = 1'000'000'000;  // nvidia-smi samples over 1/6 s to 1 s
constexpr int kBuckets = 20;
constexpr int64_t kBucketNs = kPeriodNs / kBuckets;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One kind of activity on one device.
struct Track {
  int active = 0;     // activities in flight
  int64_t since = 0;  // start of the current busy interval (active > 0)
  std::array<int64_t, kBuckets> epoch{};  // bucket number a slot holds (time / kBucketNs)
  std::array<int64_t, kBuckets> busy{};   // busy ns inside that bucket
  // The bucket the last interval ended in: most intervals (one per kernel)
  // fall inside it, and are added without dividing.
  int64_t last_start = std::numeric_limits<int64_t>::max() - kBucketNs;
  int last_slot = 0;

  // Adds the busy interval [from, to) to the ring (only its last period matters).
  void add(int64_t from, int64_t to) {
    if (from >= last_start && to <= last_start + kBucketNs) {
      busy[last_slot] += to - from;
      return;
    }
    const int64_t last = (to - 1) / kBucketNs;
    for (int64_t b = std::max(from / kBucketNs, last - kBuckets + 1); b <= last; ++b) {
      const int slot = static_cast<int>(b % kBuckets);
      if (epoch[slot] != b) {
        epoch[slot] = b;
        busy[slot] = 0;
      }
      busy[slot] += std::min(to, (b + 1) * kBucketNs) - std::max(from, b * kBucketNs);
    }
    last_start = last * kBucketNs;
    last_slot = static_cast<int>(last % kBuckets);
  }

  void begin(int64_t t) {
    if (active++ == 0) since = t;
  }

  void end(int64_t t) {
    if (--active == 0 && t > since) add(since, t);
  }

  // Percent of [first bucket of the period, now) that was busy, counting an
  // interval still in progress.
  unsigned int percent(int64_t now) const {
    const int64_t current = now / kBucketNs;
    const int64_t start = (current - kBuckets + 1) * kBucketNs;
    int64_t total = 0;
    for (int slot = 0; slot < kBuckets; ++slot) {
      if (epoch[slot] > current - kBuckets && epoch[slot] <= current) total += busy[slot];
    }
    if (active > 0) total += now - std::max(since, start);
    const int64_t span = std::max<int64_t>(now - start, 1);
    return static_cast<unsigned int>(std::min<int64_t>(100, total * 100 / span));
  }
};

// Guards a device's tracks for a few additions, twice per kernel: a pthread
// mutex's lock and unlock cost more instructions than a small kernel's
// accounting, a spin on a flag almost none.
class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

struct DeviceActivity {
  SpinLock mu;
  Track kernel;
  Track memory;
};

DeviceActivity& activity(int device) {
  // Leaked on purpose: stream workers may still run while statics destruct.
  static auto* devices = new std::array<DeviceActivity, emu::kMaxDevices>();
  return (*devices)[device];
}

} // namespace

namespace emu {

// LITERALINCLUDE START: ACTIVITY_HOOKS
void activity_begin(int device, bool kernel) {
  DeviceActivity& a = activity(device);
  const int64_t t = now_ns();
  std::lock_guard<SpinLock> lock(a.mu);
  a.memory.begin(t);  // a kernel reads and writes device memory too
  if (kernel) a.kernel.begin(t);
}

void activity_end(int device, bool kernel) {
  DeviceActivity& a = activity(device);
  const int64_t t = now_ns();
  std::lock_guard<SpinLock> lock(a.mu);
  a.memory.end(t);
  if (kernel) a.kernel.end(t);
}
// LITERALINCLUDE END: ACTIVITY_HOOKS

} // namespace emu

extern "C" {

emuError_t emuDeviceGetUtilizationRates(int device, emuUtilization* utilization) {
  EMU_API_ENTER();
  if (utilization == nullptr) {
    return emu::set_error(emuErrorInvalidValue, "emuDeviceGetUtilizationRates: utilization is null");
  }
  if (emuError_t err = emu::check_device("emuDeviceGetUtilizationRates", device)) return err;
  DeviceActivity& a = activity(device);
  const int64_t t = now_ns();
  std::lock_guard<SpinLock> lock(a.mu);
  utilization->kernel = a.kernel.percent(t);
  utilization->memory = a.memory.percent(t);
  return emuSuccess;
}

unsigned int emuUtilizationSamplePeriodMs(void) {
  return static_cast<unsigned int>(kPeriodNs / 1'000'000);
}

} // extern "C"
