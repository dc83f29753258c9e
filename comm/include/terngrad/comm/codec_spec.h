// A codec spec as text: "name" or "name:key=value,key=value". The untyped
// layer under codec_config.h: a user's registered codec reads its own keys
// from a CodecSpec; built-in codecs get typed parameters instead.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace terngrad::comm {

// Parameters parsed from "name:key=value,key=value".
struct CodecSpec {
  std::string name;
  std::map<std::string, std::string> params;
  bool operator==(const CodecSpec&) const = default;
};

// Parses a spec; throws std::invalid_argument naming the bad part. Names and
// keys are letters, digits, '_', '-', '.'; values are printable ASCII
// without spaces, ',', '=', ':', '(' or ')'.
CodecSpec parse_codec_spec(std::string_view spec);

}  // namespace terngrad::comm
