#include "core/EmuException.h"

#include <string>

namespace torch_emu {

// LITERALINCLUDE START: THROW_RUNTIME_ERROR
void throw_runtime_error(emuError_t err, const char* call) {
  std::string msg = std::string("emu runtime error: ") + emuGetErrorName(err) +
      " (" + emuGetErrorString(err) + ") in " + call;
  const char* detail = emuGetLastErrorMessage();
  if (detail != nullptr && detail[0] != '\0') {
    msg += ": ";
    msg += detail;
  }
  if (err == emuErrorMemoryAllocation) {
    throw c10::OutOfMemoryError({__func__, __FILE__, __LINE__}, msg);
  }
  throw c10::AcceleratorError({__func__, __FILE__, __LINE__}, static_cast<int32_t>(err), msg);
}
// LITERALINCLUDE END: THROW_RUNTIME_ERROR

} // namespace torch_emu
