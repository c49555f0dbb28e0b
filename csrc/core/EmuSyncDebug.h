// The sync debug mode (torch.emu.set_sync_debug_mode): operations that make
// the host wait for the device warn or raise, naming the operation, so a user
// can find the line that stalls an asynchronous device. Explicit waits
// (torch.emu.synchronize, stream and event synchronize) are not reported.
#pragma once

namespace torch_emu {

// 0: default (silent), 1: warn, 2: error, as torch.cuda's modes.
void set_sync_debug_mode(int mode);
int sync_debug_mode();

// Called where an operation waits for the device on the host's behalf.
void warn_or_error_on_sync(const char* operation);

} // namespace torch_emu
