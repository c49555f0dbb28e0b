// EMU_HOT_TLS: the thread-local variables read on every launch (inline only).
#pragma once

// LITERALINCLUDE START: HOT_TLS
// In a shared library each access to a thread-local variable is by default a
// call (__tls_get_addr) that finds the library's block for the thread; an op
// made about 36 of them, some 350 instructions. "initial-exec" places the
// variable in the static TLS block the process keeps free for libraries
// loaded later, and an access is one load. Once one variable is initial-exec
// the whole library's thread-locals go there (the library is marked
// STATIC_TLS), and that reserve is small: glibc keeps some hundreds of bytes,
// shared by every such library. So this library keeps no buffer in a
// thread-local (452 bytes in all, 2026-12-02); the mark goes on the hot ones.
#define EMU_HOT_TLS __attribute__((tls_model("initial-exec")))
// LITERALINCLUDE END: HOT_TLS
