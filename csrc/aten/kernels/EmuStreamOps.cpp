// Ops that tie tensors to streams.
#include <torch/library.h>

#include "core/EmuDeviceAllocator.h"

namespace torch_emu {
namespace {

// LITERALINCLUDE START: OP_RECORD_STREAM
// tensor.record_stream(s): the allocator must not recycle this memory until
// the work queued on `s` so far has finished.
void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "record_stream: expected an emu stream, got one on ", stream.device());
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}
// LITERALINCLUDE END: OP_RECORD_STREAM

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(record_stream));
}

} // namespace
} // namespace torch_emu
