// How a fuzz input that feeds several things (two payloads, an images and a
// labels file) is cut into pieces, and how the seed generator glues pieces
// back into one input. A mode byte in front (when a target has one) carries
// the target's switches; see each target's comment.
//
// Layout: each piece but the last is a 2-byte little-endian length and that
// many bytes (clamped to what is left, so any byte string splits); the last
// piece is the rest. A length prefix rather than a separator keeps every
// byte value usable inside a piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace terngrad::fuzz {

using Bytes = std::span<const uint8_t>;

// Splits data into exactly `count` pieces (some possibly empty).
inline std::vector<Bytes> split_pieces(Bytes data, size_t count) {
  std::vector<Bytes> out;
  for (size_t i = 0; i + 1 < count; ++i) {
    size_t len = 0;
    if (data.size() >= 2) {
      len = size_t{data[0]} | size_t{data[1]} << 8;
      data = data.subspan(2);
    } else {
      data = {};
    }
    len = len < data.size() ? len : data.size();
    out.push_back(data.first(len));
    data = data.subspan(len);
  }
  out.push_back(data);
  return out;
}

// The inverse of split_pieces for the seed generator (pieces but the last
// must be shorter than 64 KiB).
inline std::vector<uint8_t> join_pieces(const std::vector<std::vector<uint8_t>>& pieces) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + 1 < pieces.size()) {
      out.push_back(static_cast<uint8_t>(pieces[i].size()));
      out.push_back(static_cast<uint8_t>(pieces[i].size() >> 8));
    }
    out.insert(out.end(), pieces[i].begin(), pieces[i].end());
  }
  return out;
}

// A little-endian u16 off the front of data (0 when data is too short).
inline uint16_t take_u16(Bytes& data) {
  if (data.size() < 2) {
    data = {};
    return 0;
  }
  const uint16_t v = static_cast<uint16_t>(data[0] | data[1] << 8);
  data = data.subspan(2);
  return v;
}

// The mode byte off the front of data (0 when data is empty).
inline uint8_t take_u8(Bytes& data) {
  if (data.empty()) return 0;
  const uint8_t v = data[0];
  data = data.subspan(1);
  return v;
}

}  // namespace terngrad::fuzz
