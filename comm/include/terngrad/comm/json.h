// Minimal JSON writing and reading: metrics, safetensors headers, TF_CONFIG.
// Writing covers what those files need (escaped strings, numbers with
// non-finite values as null); reading is a strict RFC 8259 parser used to
// check safetensors headers, keeping numbers as text so 64-bit offsets are
// read exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace terngrad::comm::json {

// Appends s as a quoted JSON string: quote, backslash and control characters
// escaped; other bytes (UTF-8) passed through.
void append_json_string(std::string& out, std::string_view s);

// Shortest decimal that reads back to the same double; NaN and +-Inf (which
// JSON cannot represent) become null.
void append_json_number(std::string& out, double v);

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // a string's value, or a number's literal text
  std::vector<JsonValue> items;                             // array
  std::vector<std::pair<std::string, JsonValue>> members;  // object, in order

  // A non-negative integer literal as uint64; throws std::runtime_error
  // naming `what` otherwise.
  uint64_t as_u64(const std::string& what) const;
};

// Parses one JSON value spanning all of text (surrounding whitespace
// allowed). Throws std::runtime_error with the byte offset of the problem.
JsonValue parse_json(std::string_view text);

}  // namespace terngrad::comm::json
