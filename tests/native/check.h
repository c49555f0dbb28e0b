// CHECK macros of the native runtime tests: a failed check prints where, what,
// and the runtime's last error message, then exits 1.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "runtime/emu_runtime.h"

#define CHECK(cond)                                                                                  \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "CHECK failed at %s:%d: %s\n  last error message: %s\n", __FILE__,       \
                   __LINE__, #cond, emuGetLastErrorMessage());                                       \
      std::fflush(stderr);                                                                           \
      _exit(1);                                                                                      \
    }                                                                                                \
  } while (0)
#define CHECK_ERR(expr, code) CHECK((expr) == (code))
#define CHECK_OK(expr) CHECK_ERR(expr, emuSuccess)

inline bool contains(const char* haystack, const char* needle) {
  return std::strstr(haystack, needle) != nullptr;
}
