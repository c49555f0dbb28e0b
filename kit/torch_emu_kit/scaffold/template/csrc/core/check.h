// Turns a driver error into a C++ exception that Python sees as RuntimeError.
#pragma once

#include <c10/util/Exception.h>

#include "runtime/runtime.h"

#define TPLDEV_CHECK(call)                                                         \
  do {                                                                             \
    const tpldevError tpldev_error_ = (call);                                      \
    TORCH_CHECK(tpldev_error_ == tpldevSuccess, #call, ": ", tpldevGetErrorString(tpldev_error_)); \
  } while (0)
