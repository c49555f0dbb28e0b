// Boolean environment variables, read one way by every C++ reader (the Python
// twin is torch_emu/runtime/config.py env_flag). Standard C++ only: it belongs
// to the runtime, which is built without torch, and the layers above share it.
#pragma once

#include <cctype>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

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

} // namespace torch_emu
