// Private to bench/: running a Python baseline script (PyTorch) from a
// benchmark binary and reading the numbers of the one JSON object it prints.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

namespace terngrad::bench {

// Everything `cmd` writes to stdout (empty if it cannot be started).
inline std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
  pclose(p);
  return out;
}

// The number after "key": in flat JSON text, or nullopt if the key is absent.
inline std::optional<double> json_number(const std::string& text, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const auto k = text.find(quoted);
  if (k == std::string::npos) return std::nullopt;
  return std::atof(text.c_str() + k + quoted.size());
}

}  // namespace terngrad::bench
