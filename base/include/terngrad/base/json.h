// JSON for TF_CONFIG, safetensors headers, metrics logs and result files,
// over nlohmann/json. Objects keep their members in document order (a
// safetensors header's tensor order is part of the file, metrics read best in
// the order they were written). Reading is strict: RFC 8259 plus a refusal
// of duplicate object keys, which the RFC leaves to the reader and which
// would otherwise let a later member silently replace an earlier one (two
// tensors of one name, a role listed twice in TF_CONFIG).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "terngrad/base/json_fwd.h"

namespace terngrad::json {

// The deepest nesting of arrays and objects parse_strict() accepts. Writing,
// copying and comparing a Json recurse once per level, so an unbounded depth
// would let a few hundred kilobytes of "[[[[..." overflow the stack after the
// parse succeeded; no file we read nests more than a few levels.
inline constexpr size_t kMaxDepth = 512;

// Parses one JSON value spanning all of text (surrounding whitespace
// allowed). Throws std::runtime_error "JSON error at byte N: ..." for a
// syntax error, "JSON error: duplicate key \"k\"" for a repeated key, and
// "JSON error: arrays and objects nested deeper than 512 levels".
Json parse_strict(std::string_view text);

// A non-negative integer as uint64 (exactly, all 64 bits); throws
// std::runtime_error "<what> is <value>, expected a non-negative integer"
// otherwise.
uint64_t as_u64(const Json& v, const std::string& what);

// One line of compact JSON: numbers as the shortest text that reads back to
// the same value, NaN and +-Inf (which JSON cannot represent) as null, bytes
// that are not UTF-8 replaced by U+FFFD rather than refused.
std::string dump_line(const Json& v);

// As dump_line, indented by 2 for files people read.
std::string dump_pretty(const Json& v);

}  // namespace terngrad::json
