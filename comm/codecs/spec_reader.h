// Private: typed access to a parsed codec spec's key=value parameters, with
// the error messages make_codec() promises (codec, key, value and the keys
// the codec accepts), and the canonical number formatting spec() uses.
#pragma once

#include <cstdint>
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
  // A finite float in [min_value, max_value] (an open end where min_open /
  // max_open); default_value when the key is absent.
  float number_in(const std::string& key, float default_value, float min_value, bool min_open, float max_value,
                  bool max_open) const;
  // An integer in [min_value, max_value] that is a multiple of `multiple_of`
  // (or 0 when allow_zero); default_value when the key is absent.
  uint32_t integer(const std::string& key, uint32_t default_value, uint32_t min_value, uint32_t max_value,
                   uint32_t multiple_of = 1, bool allow_zero = false) const;
  // One of `choices`; the index of the default when the key is absent.
  size_t choice(const std::string& key, size_t default_index, const std::vector<std::string>& choices) const;
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
