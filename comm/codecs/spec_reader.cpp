#include "spec_reader.h"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

namespace terngrad::comm::detail {

SpecReader::SpecReader(const CodecSpec& spec, std::vector<std::string> accepted)
    : spec_(spec), accepted_(std::move(accepted)) {
  for (const auto& [key, value] : spec_.params) {
    bool known = false;
    for (const auto& a : accepted_) known = known || a == key;
    if (!known)
      throw std::invalid_argument("codec \"" + spec_.name + "\": unknown key \"" + key + "\" (value \"" + value +
                                  "\"); " + accepted_list());
  }
}

std::string SpecReader::accepted_list() const {
  if (accepted_.empty()) return spec_.name + " accepts no keys";
  std::string s = "accepted keys: ";
  for (size_t i = 0; i < accepted_.size(); ++i) s += (i ? ", " : "") + accepted_[i];
  return s;
}

void SpecReader::bad_value(const std::string& key, const std::string& value, const std::string& expected) const {
  throw std::invalid_argument("codec \"" + spec_.name + "\": key \"" + key + "\" has bad value \"" + value +
                              "\" (expected " + expected + "); " + accepted_list());
}

float SpecReader::number(const std::string& key, float default_value, float min_value) const {
  const auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return default_value;
  const std::string& text = it->second;
  const std::string expected = "a finite number >= " + format_float(min_value);
  float v = 0.0f;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end || !std::isfinite(v) || !(v >= min_value)) bad_value(key, text, expected);
  return v == 0.0f ? 0.0f : v;  // "-0" means 0; spec() must not print "-0"
}

float SpecReader::number_in(const std::string& key, float default_value, float min_value, bool min_open,
                            float max_value, bool max_open) const {
  const auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return default_value;
  const std::string& text = it->second;
  const std::string expected = std::string("a number in ") + (min_open ? "(" : "[") + format_float(min_value) + ", " +
                               format_float(max_value) + (max_open ? ")" : "]");
  float v = 0.0f;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  const bool above_min = min_open ? v > min_value : v >= min_value;
  const bool below_max = max_open ? v < max_value : v <= max_value;
  if (ec != std::errc() || ptr != end || !std::isfinite(v) || !above_min || !below_max) bad_value(key, text, expected);
  return v == 0.0f ? 0.0f : v;
}

uint32_t SpecReader::integer(const std::string& key, uint32_t default_value, uint32_t min_value, uint32_t max_value,
                             uint32_t multiple_of, bool allow_zero) const {
  const auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return default_value;
  const std::string& text = it->second;
  std::string expected = "an integer in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "]";
  if (multiple_of > 1) expected += " that is a multiple of " + std::to_string(multiple_of);
  if (allow_zero) expected += ", or 0";
  uint32_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ec != std::errc() || ptr != end) bad_value(key, text, expected);
  if (v == 0 && allow_zero) return 0;
  if (v < min_value || v > max_value || v % multiple_of != 0) bad_value(key, text, expected);
  return v;
}

size_t SpecReader::choice(const std::string& key, size_t default_index, const std::vector<std::string>& choices) const {
  const auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return default_index;
  for (size_t i = 0; i < choices.size(); ++i)
    if (it->second == choices[i]) return i;
  std::string expected;
  for (size_t i = 0; i < choices.size(); ++i) expected += (i ? " or " : "") + choices[i];
  bad_value(key, it->second, expected);
}

bool SpecReader::flag(const std::string& key, bool default_value) const {
  const auto it = spec_.params.find(key);
  if (it == spec_.params.end()) return default_value;
  if (it->second == "0") return false;
  if (it->second == "1") return true;
  bad_value(key, it->second, "0 or 1");
}

std::string format_float(float v) {
  char buf[32];
  const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;  // 32 bytes always hold the shortest form of a float
  return std::string(buf, ptr);
}

}  // namespace terngrad::comm::detail
