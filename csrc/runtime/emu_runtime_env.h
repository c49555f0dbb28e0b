// What the runtime and the layers above read of the process's environment:
// boolean environment variables, read one way by every C++ reader (the Python
// twin is torch_emu/runtime/config.py env_flag), and the cores it may use.
// Standard C++ and POSIX only: it belongs to the runtime, which is built
// without torch, and the layers above share it.
#pragma once

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace torch_emu {

// Variable `name` as a boolean: 1/true/yes/on or 0/false/no/off, any case,
// spaces around ignored; nullopt when unset or blank. Any other value sets
// *error to a message naming the variable, the value and what is accepted,
// and returns nullopt.
inline std::optional<bool> env_bool(const char* name, std::string* error) {
  const char* raw = std::getenv(name);
  std::string word;
  for (const char* p = raw != nullptr ? raw : ""; *p != '\0'; ++p) {
    word += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  }
  const size_t begin = word.find_first_not_of(" \t\n\r");
  word = begin == std::string::npos ? "" : word.substr(begin, word.find_last_not_of(" \t\n\r") + 1 - begin);
  if (word.empty()) return std::nullopt;
  if (word == "1" || word == "true" || word == "yes" || word == "on") return true;
  if (word == "0" || word == "false" || word == "no" || word == "off") return false;
  *error = std::string(name) + "='" + raw + "' is not a boolean: expected 1/0, true/false, yes/no or on/off";
  return std::nullopt;
}

// The same, raising the message as std::runtime_error (a RuntimeError in
// Python), for readers outside the runtime's C API.
inline std::optional<bool> env_bool(const char* name) {
  std::string error;
  const std::optional<bool> value = env_bool(name, &error);
  if (!error.empty()) throw std::runtime_error(error);
  return value;
}

// The cores this process may run on, read once: its CPU affinity, which
// `taskset -c 0` or a container's cpuset makes smaller than the machine
// (std::thread::hardware_concurrency counts the machine's). Spinning, a
// stream worker beside the host thread and parallel copies pay only with
// more than one.
inline unsigned usable_cores() {
  static const unsigned cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
      return static_cast<unsigned>(CPU_COUNT(&set));
    }
    return std::max(1u, std::thread::hardware_concurrency());
  }();
  return cores;
}

} // namespace torch_emu
