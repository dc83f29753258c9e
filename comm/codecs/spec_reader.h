// Private: typed access to a parsed codec spec's key=value parameters, with
// the error messages make_codec() promises (codec, key, value and the keys
// the codec accepts), and the canonical number formatting spec() uses.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

class SpecReader {
 public:
  // Throws std::invalid_argument at once if spec holds a key not in `accepted`,
  // so a misspelled key never silently falls back to a default.
  SpecReader(const CodecSpec& spec, std::vector<std::string> accepted);

  // A finite float >= min_value; default_value when the key is absent.
  float number(const std::string& key, float default_value, float min_value) const;
  // "0" or "1"; default_value when the key is absent.
  bool flag(const std::string& key, bool default_value) const;

 private:
  [[noreturn]] void bad_value(const std::string& key, const std::string& value,
                              const std::string& expected) const;
  std::string accepted_list() const;

  const CodecSpec& spec_;
  std::vector<std::string> accepted_;
};

// Shortest decimal that reads back as exactly v ("2.5", "0.1", "1e-05"), so
// spec() strings round-trip through make_codec() without drift.
std::string format_float(float v);

}  // namespace terngrad::comm::detail
