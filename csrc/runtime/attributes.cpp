// emuDeviceGetAttribute and emuDeviceGetUuid. The emulated device's
// multiprocessors are the host's threads and its memory is host memory, so the
// attributes that have a real value come from the host; the others are the
// documented constants of emu_runtime_attributes.h. Nothing here depends on
// which runtime is installed (emu_runtime_plugin.h): devices are checked
// through the API.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include "runtime/emu_runtime_attributes.h"
#include "runtime/runtime_internal.h"

namespace {

int host_l2_cache_bytes() {
  const long bytes = sysconf(_SC_LEVEL2_CACHE_SIZE);
  return bytes > 0 ? static_cast<int>(bytes) : 0;
}

int host_max_clock_khz() {
  std::ifstream in("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
  long khz = 0;
  return (in >> khz) && khz > 0 ? static_cast<int>(khz) : 0;
}

// Identifies the host: systemd's machine id, else the host name.
std::string host_identity() {
  std::ifstream in("/etc/machine-id");
  std::string id;
  if (in >> id) return id;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

uint64_t fnv1a(const std::string& text, uint64_t hash) {
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ULL;
  return hash;
}

} // namespace

extern "C" {

emuError_t emuDeviceGetAttribute(int* value, emuDeviceAttr attr, int device) {
  if (value == nullptr) return emu::set_error(emuErrorInvalidValue, "emuDeviceGetAttribute: value is null");
  if (emuError_t err = emu::check_device("emuDeviceGetAttribute", device)) return err;
  switch (attr) {
    case emuDevAttrIntegrated: *value = 1; return emuSuccess;
    case emuDevAttrMultiGpuBoard: *value = 0; return emuSuccess;
    case emuDevAttrMaxThreadsPerMultiProcessor: *value = 1; return emuSuccess;
    case emuDevAttrWarpSize: *value = 1; return emuSuccess;
    case emuDevAttrL2CacheSize: *value = host_l2_cache_bytes(); return emuSuccess;
    case emuDevAttrClockRate: *value = host_max_clock_khz(); return emuSuccess;
    case emuDevAttrMemoryClockRate:
    case emuDevAttrGlobalMemoryBusWidth:
    case emuDevAttrSharedMemoryPerBlock:
    case emuDevAttrSharedMemoryPerMultiprocessor: *value = 0; return emuSuccess;
  }
  return emu::set_error(emuErrorInvalidValue, "emuDeviceGetAttribute: unknown attribute %d", static_cast<int>(attr));
}

emuError_t emuDeviceGetUuid(unsigned char uuid[16], int device) {
  if (uuid == nullptr) return emu::set_error(emuErrorInvalidValue, "emuDeviceGetUuid: uuid is null");
  if (emuError_t err = emu::check_device("emuDeviceGetUuid", device)) return err;
  const std::string key = host_identity() + "/emu:" + std::to_string(device);
  const uint64_t halves[2] = {fnv1a(key, 0xcbf29ce484222325ULL), fnv1a(key, 0x84222325cbf29ce4ULL)};
  std::memcpy(uuid, halves, sizeof(halves));
  uuid[6] = static_cast<unsigned char>((uuid[6] & 0x0f) | 0x80);  // RFC 9562 version 8 (custom)
  uuid[8] = static_cast<unsigned char>((uuid[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return emuSuccess;
}

} // extern "C"
