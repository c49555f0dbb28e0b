// Devices and streams as the integration core sees them: c10::Device indices,
// c10::Stream handles and the per-thread current device/stream, mapped onto the
// runtime's emuStream_t.
//
// Stream ids (c10::StreamId) per device: 0 is the default stream; then a pool
// of kStreamsPerPool low-priority streams, then a pool of kStreamsPerPool
// high-priority streams, handed out round-robin like CUDA's pools. Any larger
// id is an external stream's handle (stream_from_external).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <string>

#include "runtime/emu_runtime.h"

namespace torch_emu {

constexpr int kStreamsPerPool = 32;

// Number of devices; 0 if the runtime cannot start (never throws).
c10::DeviceIndex device_count() noexcept;
// Throws a clear error naming the index and the device count.
void check_device_index(c10::DeviceIndex index);
// That error, for an index given as text (from Python, of any size).
[[noreturn]] void invalid_device_index(const std::string& index);
c10::DeviceIndex current_device();
void set_device(c10::DeviceIndex index);
// True once the device's streams exist, i.e. the device has been used.
bool device_initialized(c10::DeviceIndex index);

// The runtime stream behind a c10::Stream of type PrivateUse1.
emuStream_t native_stream(const c10::Stream& stream);
// The same, unchecked, for reports (memory snapshots and history) that name the
// stream of a cached block: an external stream may be destroyed since.
emuStream_t reported_stream(const c10::Stream& stream);
// device < 0 means the current device.
c10::Stream default_stream(c10::DeviceIndex device = -1);
c10::Stream current_stream(c10::DeviceIndex device = -1);
c10::Stream stream_from_pool(c10::DeviceIndex device, bool high_priority);
// Makes `stream` current for its device on this thread; returns the previous.
c10::Stream exchange_stream(const c10::Stream& stream);
int stream_priority(const c10::Stream& stream);
// A c10::Stream for a runtime stream created outside PyTorch (its id is the
// handle, as for CUDA's external streams). Throws if `handle` is not a live
// stream, or (device >= 0) if it lives on another device.
c10::Stream stream_from_external(emuStream_t handle, c10::DeviceIndex device);
// Whether `stream` still exists: a pool stream always does, an external one
// until its owner destroys it (which waits for its work first).
bool stream_exists(const c10::Stream& stream);

} // namespace torch_emu
