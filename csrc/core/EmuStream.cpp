#include "core/EmuStream.h"

#include <c10/util/CallOnce.h>

#include <array>
#include <atomic>
#include <mutex>

#include "core/EmuException.h"
#include "runtime/emu_runtime_tls.h"

namespace torch_emu {
namespace {

constexpr int kMaxDevices = 16;
// Index layout of a device's stream table (the c10::StreamId is the index).
constexpr int kLowPoolStart = 1;
constexpr int kHighPoolStart = kLowPoolStart + kStreamsPerPool;
constexpr int kStreamsPerDevice = kHighPoolStart + kStreamsPerPool;

// LITERALINCLUDE START: STREAM_POOLS
// Every stream a device will ever hand out is created on first use of the
// device, so a c10::StreamId is a plain index and lookups need no lock.
struct DeviceStreams {
  c10::once_flag created; // c10's: tests a flag first, where std::call_once writes thread-locals
  std::array<emuStream_t, kStreamsPerDevice> streams{};
  std::atomic<uint32_t> next_low{0};
  std::atomic<uint32_t> next_high{0};
};

std::array<DeviceStreams, kMaxDevices>& stream_table() {
  // Leaked on purpose: stream workers may still run while statics destruct.
  static auto* table = new std::array<DeviceStreams, kMaxDevices>();
  return *table;
}

DeviceStreams& streams_of(c10::DeviceIndex device) {
  DeviceStreams& d = stream_table()[device];
  c10::call_once(d.created, [&] {
    int previous = 0;
    EMU_CHECK(emuGetDevice(&previous));
    EMU_CHECK(emuSetDevice(device));
    int least = 0, greatest = 0;
    EMU_CHECK(emuDeviceGetStreamPriorityRange(&least, &greatest));
    for (int i = 0; i < kStreamsPerDevice; ++i) {
      EMU_CHECK(emuStreamCreateWithPriority(&d.streams[i], i >= kHighPoolStart ? greatest : least));
    }
    EMU_CHECK(emuSetDevice(previous));
  });
  return d;
}
// LITERALINCLUDE END: STREAM_POOLS

// The current stream of each device, per host thread (0 = default stream).
EMU_HOT_TLS thread_local std::array<c10::StreamId, kMaxDevices> tls_current_stream{};

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  if (device < 0) {
    return current_device();
  }
  check_device_index(device);
  return device;
}

c10::Stream make_stream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}

// An external stream's id is its handle.
emuStream_t handle_of(c10::StreamId id) {
  return reinterpret_cast<emuStream_t>(static_cast<intptr_t>(id));
}

// It is validated on every use (a registry lookup, off the hot path of the
// pool streams): PyTorch may hand back any id a user built a torch.Stream from.
emuStream_t external_handle(c10::StreamId id, c10::DeviceIndex device) {
  const emuStream_t handle = handle_of(id);
  int owner = -1;
  TORCH_CHECK(emuStreamGetDevice(handle, &owner) == emuSuccess, "invalid emu stream id ", id,
              ": neither a pool stream nor a live external stream");
  TORCH_CHECK(owner == device, "emu stream ", id, " belongs to emu:", owner, ", not emu:", static_cast<int>(device));
  return handle;
}

} // namespace

c10::DeviceIndex device_count() noexcept {
  // Fixed once the runtime is up; asked on every kernel launch, so remembered.
  static std::atomic<int> known{-1};
  int count = known.load(std::memory_order_relaxed);
  if (count >= 0) {
    return static_cast<c10::DeviceIndex>(count);
  }
  if (emuGetDeviceCount(&count) != emuSuccess) {
    return 0; // not remembered: a later call reports the runtime's error again
  }
  known.store(count, std::memory_order_relaxed);
  return static_cast<c10::DeviceIndex>(count);
}

void check_device_index(c10::DeviceIndex index) {
  if (C10_UNLIKELY(index < 0 || index >= device_count())) {
    invalid_device_index(std::to_string(index));
  }
}

void invalid_device_index(const std::string& index) {
  const c10::DeviceIndex count = device_count();
  if (count == 0) {
    // Surface the runtime's own reason (bad configuration, bad fork...).
    int ignored = 0;
    EMU_CHECK(emuGetDeviceCount(&ignored));
  }
  throw c10::AcceleratorError(
      {__func__, __FILE__, __LINE__}, emuErrorInvalidDevice,
      c10::str("Invalid device emu:", index, ": there ",
               count == 1 ? "is 1 emu device" : c10::str("are ", static_cast<int>(count), " emu devices"),
               " (set TORCH_EMU_DEVICE_COUNT to change this)"));
}

c10::DeviceIndex current_device() {
  int device = 0;
  EMU_CHECK(emuGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

void set_device(c10::DeviceIndex index) {
  check_device_index(index);
  EMU_CHECK(emuSetDevice(index));
}

bool device_initialized(c10::DeviceIndex index) {
  return index >= 0 && index < kMaxDevices && stream_table()[index].created.test_once();
}

bool stream_exists(const c10::Stream& stream) {
  if (stream.id() < kStreamsPerDevice) {
    return true;
  }
  int owner = -1;
  return emuStreamGetDevice(handle_of(stream.id()), &owner) == emuSuccess;
}

emuStream_t native_stream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "expected an emu stream, got a stream of ", stream.device());
  const c10::StreamId id = stream.id();
  if (C10_UNLIKELY(id >= kStreamsPerDevice)) {
    return external_handle(id, stream.device_index());
  }
  TORCH_CHECK(id >= 0, "invalid emu stream id ", id);
  return streams_of(resolve(stream.device_index())).streams[id];
}

emuStream_t reported_stream(const c10::Stream& stream) {
  if (stream.id() >= kStreamsPerDevice) {
    return handle_of(stream.id());
  }
  return native_stream(stream);
}

// LITERALINCLUDE START: EXTERNAL_STREAM
c10::Stream stream_from_external(emuStream_t handle, c10::DeviceIndex device) {
  int owner = -1;
  EMU_CHECK(emuStreamGetDevice(handle, &owner)); // rejects anything but a live stream
  TORCH_CHECK_VALUE(device < 0 || device == owner, "the external stream ", static_cast<void*>(handle),
                    " belongs to emu:", owner, ", not emu:", static_cast<int>(device));
  const auto id = static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(handle));
  TORCH_INTERNAL_ASSERT(id >= kStreamsPerDevice, "stream handle collides with the pool ids");
  return make_stream(static_cast<c10::DeviceIndex>(owner), id);
}
// LITERALINCLUDE END: EXTERNAL_STREAM

c10::Stream default_stream(c10::DeviceIndex device) {
  return make_stream(resolve(device), 0);
}

c10::Stream current_stream(c10::DeviceIndex device) {
  device = resolve(device);
  return make_stream(device, tls_current_stream[device]);
}

c10::Stream stream_from_pool(c10::DeviceIndex device, bool high_priority) {
  device = resolve(device);
  DeviceStreams& d = streams_of(device);
  const uint32_t n = (high_priority ? d.next_high : d.next_low).fetch_add(1) % kStreamsPerPool;
  return make_stream(device, (high_priority ? kHighPoolStart : kLowPoolStart) + n);
}

c10::Stream exchange_stream(const c10::Stream& stream) {
  const c10::DeviceIndex device = stream.device_index();
  if (device >= 0 && device < kMaxDevices && tls_current_stream[device] == stream.id()) {
    return stream; // already current: the common case inside kernel launches
  }
  native_stream(stream); // validates the stream
  const c10::Stream previous = make_stream(device, tls_current_stream[device]);
  tls_current_stream[device] = stream.id();
  return previous;
}

int stream_priority(const c10::Stream& stream) {
  int priority = 0;
  EMU_CHECK(emuStreamGetPriority(native_stream(stream), &priority));
  return priority;
}

} // namespace torch_emu
