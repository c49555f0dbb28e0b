// The driver's implementation over host memory: a table of live allocations
// per device, so that capacity, free memory and pointer lookups are exact.
#include "runtime/runtime.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Device {
  size_t capacity = 0;
  size_t used = 0;
};

struct Runtime {
  std::mutex mutex;
  std::vector<Device> devices;
  std::map<const char*, std::pair<int, size_t>> blocks; // start -> (device, bytes)
};

size_t parse_bytes(const char* text, size_t fallback) {
  if (text == nullptr || *text == '\0') {
    return fallback;
  }
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  const std::string suffix(end);
  const size_t scale = suffix == "K" ? 1ull << 10 : suffix == "M" ? 1ull << 20 : suffix == "G" ? 1ull << 30 : 1;
  return value > 0 && (suffix.empty() || scale > 1) ? value * scale : fallback;
}

Runtime& runtime() {
  static Runtime* rt = [] {
    auto* r = new Runtime(); // never destroyed: tensors may die during exit
    const char* count = std::getenv("TPLDEV_DEVICE_COUNT");
    const int n = count != nullptr ? std::atoi(count) : 2;
    r->devices.resize(n > 0 ? n : 2);
    for (Device& d : r->devices) {
      d.capacity = parse_bytes(std::getenv("TPLDEV_DEVICE_MEMORY"), 1ull << 30);
    }
    return r;
  }();
  return *rt;
}

thread_local int current_device = 0;

} // namespace

extern "C" {

int tpldevDeviceCount(void) {
  return static_cast<int>(runtime().devices.size());
}

tpldevError tpldevGetDevice(int* device) {
  *device = current_device;
  return tpldevSuccess;
}

tpldevError tpldevSetDevice(int device) {
  if (device < 0 || device >= tpldevDeviceCount()) {
    return tpldevErrorInvalidDevice;
  }
  current_device = device;
  return tpldevSuccess;
}

tpldevError tpldevDeviceSynchronize(int device) {
  // Every call completes before it returns: nothing is ever pending.
  return device >= 0 && device < tpldevDeviceCount() ? tpldevSuccess : tpldevErrorInvalidDevice;
}

tpldevError tpldevMalloc(void** ptr, size_t bytes) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  Device& d = rt.devices[current_device];
  if (bytes > d.capacity - d.used) {
    return tpldevErrorOutOfMemory;
  }
  void* p = std::malloc(bytes > 0 ? bytes : 1);
  if (p == nullptr) {
    return tpldevErrorOutOfMemory;
  }
  d.used += bytes;
  rt.blocks[static_cast<const char*>(p)] = {current_device, bytes};
  *ptr = p;
  return tpldevSuccess;
}

tpldevError tpldevFree(void* ptr) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  auto it = rt.blocks.find(static_cast<const char*>(ptr));
  if (it == rt.blocks.end()) {
    return tpldevErrorInvalidValue;
  }
  rt.devices[it->second.first].used -= it->second.second;
  rt.blocks.erase(it);
  std::free(ptr);
  return tpldevSuccess;
}

tpldevError tpldevMemGetInfo(int device, size_t* free_bytes, size_t* total_bytes) {
  Runtime& rt = runtime();
  if (device < 0 || device >= tpldevDeviceCount()) {
    return tpldevErrorInvalidDevice;
  }
  std::lock_guard<std::mutex> lock(rt.mutex);
  *total_bytes = rt.devices[device].capacity;
  *free_bytes = rt.devices[device].capacity - rt.devices[device].used;
  return tpldevSuccess;
}

tpldevError tpldevPointerGetDevice(const void* ptr, int* device) {
  Runtime& rt = runtime();
  std::lock_guard<std::mutex> lock(rt.mutex);
  const char* p = static_cast<const char*>(ptr);
  auto it = rt.blocks.upper_bound(p); // the first block starting after p
  if (it == rt.blocks.begin() || p >= std::prev(it)->first + std::prev(it)->second.second) {
    return tpldevErrorInvalidValue;
  }
  *device = std::prev(it)->second.first;
  return tpldevSuccess;
}

tpldevError tpldevMemcpy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) {
    std::memcpy(dst, src, bytes);
  }
  return tpldevSuccess;
}

const char* tpldevGetErrorString(tpldevError error) {
  switch (error) {
    case tpldevSuccess:
      return "no error";
    case tpldevErrorInvalidDevice:
      return "invalid device ordinal";
    case tpldevErrorOutOfMemory:
      return "out of memory";
    case tpldevErrorInvalidValue:
      return "invalid argument";
  }
  return "unknown error";
}

} // extern "C"
