// Configuration, initialisation, fork detection, errors and devices.
//
// The runtime reads its configuration from the environment once, at the first
// API call. A bad value does not crash or silently fall back to a default:
// every call fails with emuErrorInitializationError and a message naming the
// variable, so a typo in TORCH_EMU_DEVICE_MEMORY is found immediately.

#include <pthread.h>

#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "runtime/emu_runtime_env.h"
#include "runtime/runtime_internal.h"

namespace emu {

Config g_config = {2, size_t{8} << 30, false};
std::atomic<int> g_init_state{kUninitialised};
std::atomic<bool> g_forked_child{false};
std::atomic<bool> g_device_lost{false};
std::atomic<bool> g_device_state_created{false};

namespace {

// Why initialisation failed (filled once, then read-only).
char g_init_error[512];

// This thread's last error message: a buffer made at the thread's first error
// and freed by a pthread key at its exit, which comes after every C++
// thread_local destructor (one may still fail a call). Not a thread_local
// array: the variables of this library live in the static TLS block
// (EMU_HOT_TLS), which has room for a few hundred bytes, not a kilobyte.
constexpr size_t kErrorMessageBytes = 1024;

// The key, or nullptr if the process has no key left (then messages are dropped).
const pthread_key_t* error_message_key() {
  static pthread_key_t key{};
  static const bool made = pthread_key_create(&key, &std::free) == 0;
  return made ? &key : nullptr;
}

// This thread's message so far, nullptr if it never had one.
char* existing_error_message() {
  const pthread_key_t* key = error_message_key();
  return key != nullptr ? static_cast<char*>(pthread_getspecific(*key)) : nullptr;
}

// nullptr only if no buffer could be made: the message is dropped.
char* error_message_buffer() {
  char* buffer = existing_error_message();
  if (buffer == nullptr && error_message_key() != nullptr) {
    buffer = static_cast<char*>(std::calloc(1, kErrorMessageBytes));
    if (buffer != nullptr && pthread_setspecific(*error_message_key(), buffer) != 0) {
      std::free(buffer);
      buffer = nullptr;
    }
  }
  return buffer;
}
EMU_HOT_TLS thread_local int t_current_device = 0;

const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? v : nullptr;
}

bool parse_device_count(const char* text, int* out) {
  if (text == nullptr) {
    *out = 2;
    return true;
  }
  long value = 0;
  for (const char* p = text; *p != '\0'; ++p) {
    if (!std::isdigit(static_cast<unsigned char>(*p)) || value > kMaxDevices) return false;
    value = value * 10 + (*p - '0');
  }
  if (value < 1 || value > kMaxDevices) return false;
  *out = static_cast<int>(value);
  return true;
}

// "8589934592", "512MiB", "8G", "1.5 gb": a number and an optional binary
// (1024-based) suffix, case-insensitive. The result is rounded up to a page.
bool parse_memory_size(const char* text, size_t* out) {
  if (text == nullptr) {
    *out = size_t{8} << 30;
    return true;
  }
  const char* p = text;
  while (*p == ' ') ++p;
  if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
  long double value = 0;
  while (std::isdigit(static_cast<unsigned char>(*p))) value = value * 10 + (*p++ - '0');
  if (*p == '.') {
    ++p;
    if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
    for (long double scale = 0.1L; std::isdigit(static_cast<unsigned char>(*p)); scale /= 10) {
      value += scale * (*p++ - '0');
    }
  }
  while (*p == ' ') ++p;

  char suffix[8] = {0};
  size_t len = 0;
  while (*p != '\0' && *p != ' ') {
    if (len + 1 >= sizeof(suffix)) return false;
    suffix[len++] = static_cast<char>(std::tolower(static_cast<unsigned char>(*p++)));
  }
  while (*p == ' ') ++p;
  if (*p != '\0') return false;

  static const struct {
    const char* name;
    int shift;
  } kSuffixes[] = {
      {"", 0},     {"b", 0},     {"k", 10},    {"kb", 10}, {"kib", 10}, {"m", 20},
      {"mb", 20},  {"mib", 20},  {"g", 30},    {"gb", 30}, {"gib", 30}, {"t", 40},
      {"tb", 40},  {"tib", 40},
  };
  int shift = -1;
  for (const auto& s : kSuffixes) {
    if (std::strcmp(suffix, s.name) == 0) shift = s.shift;
  }
  if (shift < 0) return false;

  // Cap at 64 TiB per device: 16 such devices still fit a 47-bit address space.
  const long double bytes = std::ceil(std::ldexp(value, shift));
  if (bytes < 1 || bytes > std::ldexp(1.0L, 46)) return false;
  *out = round_up_to_page(static_cast<size_t>(bytes));
  return true;
}

// LITERALINCLUDE START: RUNTIME_INIT
// The child of a process that used the runtime inherits its memory but not its
// stream worker threads; any state it sees may be mid-update. Refuse to run.
void on_fork_child() {
  g_forked_child.store(g_device_state_created.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void init_once() {
  Config cfg;
  const char* count = env_value("TORCH_EMU_DEVICE_COUNT");
  const char* memory = env_value("TORCH_EMU_DEVICE_MEMORY");
  std::string strict_error;
  const std::optional<bool> strict = torch_emu::env_bool("TORCH_EMU_STRICT", &strict_error);
  const char* profile = env_value("TORCH_EMU_PROFILE");
  emuPerformanceModel model{0, 0, 0, 0, 0, 1.0};
  std::string model_error;
  if (!parse_device_count(count, &cfg.device_count)) {
    std::snprintf(g_init_error, sizeof(g_init_error),
                  "TORCH_EMU_DEVICE_COUNT='%s' is not a device count between 1 and %d", count,
                  kMaxDevices);
  } else if (!parse_memory_size(memory, &cfg.capacity)) {
    std::snprintf(g_init_error, sizeof(g_init_error),
                  "TORCH_EMU_DEVICE_MEMORY='%s' is not a memory size between 1 byte and 64 TiB "
                  "(bytes, or a number with a K/M/G/T, KB/MB/GB/TB or KiB/MiB/GiB/TiB suffix)",
                  memory);
  } else if (!strict_error.empty()) {
    std::snprintf(g_init_error, sizeof(g_init_error), "%s", strict_error.c_str());
  } else if (profile != nullptr && !parse_performance_model(profile, &model, &model_error)) {
    std::snprintf(g_init_error, sizeof(g_init_error), "TORCH_EMU_PROFILE='%s': %s", profile, model_error.c_str());
  }
  if (g_init_error[0] != '\0') {
    g_init_state.store(kFailed, std::memory_order_release);
    return;
  }
  cfg.strict = strict.value_or(false);
  g_config = cfg;
  set_performance_model(model);
  if (cfg.strict) install_strict_handler();
  pthread_atfork(nullptr, nullptr, on_fork_child);
  g_init_state.store(kReady, std::memory_order_release);
}
// LITERALINCLUDE END: RUNTIME_INIT

} // namespace

// LITERALINCLUDE START: RUNTIME_FORK
void note_device_state_created() {
  g_device_state_created.store(true, std::memory_order_relaxed);
}

emuError_t init_slow(const char* call, bool releases) {
  if (plugged_runtime()) {
    return set_error(emuErrorNotSupported, "%s: not provided by the '%s' runtime; it is a call of the native "
                     "runtime (unset TORCH_EMU_RUNTIME to use it)", call, emuRuntimeName());
  }
  if (g_device_lost.load(std::memory_order_acquire)) {
    if (releases) return emuSuccess;
    return set_error(emuErrorDeviceLost, "%s: the emu device was lost (%s); every call fails from then on, "
                     "as after a real device falls off the bus", call, device_lost_reason());
  }
  if (g_forked_child.load(std::memory_order_relaxed)) {
    return set_error(emuErrorInitializationError,
                     "%s: emu runtime was initialised in the parent process before fork(); the "
                     "child cannot use it. Use the 'spawn' start method for multiprocessing",
                     call);
  }
  static std::once_flag once;
  std::call_once(once, init_once);
  if (g_init_state.load(std::memory_order_acquire) != kReady) {
    return set_error(emuErrorInitializationError, "%s: emu runtime initialisation failed: %s", call,
                     g_init_error);
  }
  return emuSuccess;
}
// LITERALINCLUDE END: RUNTIME_FORK

emuError_t set_error(emuError_t err, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  if (char* buffer = error_message_buffer()) {
    std::vsnprintf(buffer, kErrorMessageBytes, fmt, args);
  }
  va_end(args);
  return err;
}

// Through the API, so that it serves any installed runtime (attributes.cpp,
// emuRuntimeCheckDevice).
emuError_t check_device(const char* call, int device) {
  int count = 0;
  if (emuError_t err = emuGetDeviceCount(&count)) return err;
  if (device < 0 || device >= count) {
    return set_error(emuErrorInvalidDevice, "%s: invalid device index %d (there are %d emu devices)",
                     call, device, count);
  }
  return emuSuccess;
}

int current_device() {
  return t_current_device;
}

ByteString format_bytes(size_t bytes) {
  ByteString out;
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    std::snprintf(out.text, sizeof(out.text), "%zu bytes", bytes);
    return out;
  }
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  std::snprintf(out.text, sizeof(out.text), "%.2f %s", value, kUnits[unit]);
  return out;
}

} // namespace emu

using emu::set_error;

extern "C" {

const char* emuGetErrorName(emuError_t error) {
  switch (error) {
    case emuSuccess: return "emuSuccess";
    case emuErrorInvalidValue: return "emuErrorInvalidValue";
    case emuErrorMemoryAllocation: return "emuErrorMemoryAllocation";
    case emuErrorInitializationError: return "emuErrorInitializationError";
    case emuErrorInvalidDevice: return "emuErrorInvalidDevice";
    case emuErrorInvalidDevicePointer: return "emuErrorInvalidDevicePointer";
    case emuErrorInvalidResourceHandle: return "emuErrorInvalidResourceHandle";
    case emuErrorNotReady: return "emuErrorNotReady";
    case emuErrorLaunchFailure: return "emuErrorLaunchFailure";
    case emuErrorStreamCaptureUnsupported: return "emuErrorStreamCaptureUnsupported";
    case emuErrorStreamCaptureInvalidated: return "emuErrorStreamCaptureInvalidated";
    case emuErrorDeviceLost: return "emuErrorDeviceLost";
    case emuErrorEccUncorrectable: return "emuErrorEccUncorrectable";
    case emuErrorNotSupported: return "emuErrorNotSupported";
    case emuErrorUnknown: return "emuErrorUnknown";
  }
  return "emuErrorUnknown";
}

const char* emuGetErrorString(emuError_t error) {
  switch (error) {
    case emuSuccess: return "no error";
    case emuErrorInvalidValue: return "invalid argument";
    case emuErrorMemoryAllocation: return "out of memory";
    case emuErrorInitializationError: return "initialization error";
    case emuErrorInvalidDevice: return "invalid device ordinal";
    case emuErrorInvalidDevicePointer: return "invalid device pointer";
    case emuErrorInvalidResourceHandle: return "invalid resource handle";
    case emuErrorNotReady: return "device not ready";
    case emuErrorLaunchFailure: return "unspecified launch failure";
    case emuErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case emuErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case emuErrorDeviceLost: return "device lost";
    case emuErrorEccUncorrectable: return "uncorrectable ECC error encountered";
    case emuErrorNotSupported: return "operation not supported";
    case emuErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

const char* emuGetLastErrorMessage(void) {
  const char* buffer = emu::existing_error_message();
  return buffer != nullptr ? buffer : "";
}

void emuRuntimeSetErrorMessage(const char* message) {
  if (char* buffer = emu::error_message_buffer()) {
    std::snprintf(buffer, emu::kErrorMessageBytes, "%s", message != nullptr ? message : "");
  }
}

emuError_t emuRuntimeCheckDevice(const char* call, int device) {
  return emu::check_device(call, device);
}

} // extern "C"

// The native runtime's device calls (plugin.cpp makes them the API).
namespace emu::native {

emuError_t emuGetDeviceCount(int* count) {
  EMU_API_ENTER();
  if (count == nullptr) return set_error(emuErrorInvalidValue, "emuGetDeviceCount: count is null");
  *count = emu::g_config.device_count;
  return emuSuccess;
}

emuError_t emuGetDevice(int* device) {
  EMU_API_ENTER();
  if (device == nullptr) return set_error(emuErrorInvalidValue, "emuGetDevice: device is null");
  *device = emu::t_current_device;
  return emuSuccess;
}

emuError_t emuSetDevice(int device) {
  EMU_API_ENTER();
  if (emuError_t err = emu::check_device("emuSetDevice", device)) return err;
  emu::t_current_device = device;
  return emuSuccess;
}

emuError_t emuGetDeviceProperties(emuDeviceProp* prop, int device) {
  EMU_API_ENTER();
  if (prop == nullptr) return set_error(emuErrorInvalidValue, "emuGetDeviceProperties: prop is null");
  if (emuError_t err = emu::check_device("emuGetDeviceProperties", device)) return err;
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s", "emu (emulated accelerator)");
  prop->totalGlobalMem = emu::g_config.capacity;
  prop->major = 1;
  prop->minor = 0;
  const unsigned threads = std::thread::hardware_concurrency();
  prop->multiProcessorCount = threads > 0 ? static_cast<int>(threads) : 1;
  return emuSuccess;
}

int emuStrictMode(void) {
  return emu::ensure_init("emuStrictMode") == emuSuccess && emu::g_config.strict ? 1 : 0;
}

} // namespace emu::native
