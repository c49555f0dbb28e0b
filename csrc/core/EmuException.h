// Turning runtime error codes into the exceptions PyTorch users expect.
#pragma once

#include <c10/util/Exception.h>

#include "runtime/emu_runtime.h"

namespace torch_emu {

// Throws c10::OutOfMemoryError (torch.OutOfMemoryError in Python) for
// emuErrorMemoryAllocation and c10::AcceleratorError (torch.AcceleratorError,
// a RuntimeError) for every other code. The message names the failing call and
// carries the runtime's own detail for this thread.
[[noreturn]] void throw_runtime_error(emuError_t err, const char* call);

} // namespace torch_emu

// LITERALINCLUDE START: EMU_CHECK
#define EMU_CHECK(EXPR)                                    \
  do {                                                     \
    const emuError_t emu_check_err_ = (EXPR);              \
    if (C10_UNLIKELY(emu_check_err_ != emuSuccess)) {      \
      ::torch_emu::throw_runtime_error(emu_check_err_, #EXPR); \
    }                                                      \
  } while (0)
// LITERALINCLUDE END: EMU_CHECK
