#include "state_blob.h"

#include <stdexcept>

namespace terngrad::train::detail {

namespace {

constexpr uint32_t kMagic = 0x534F4754u;  // "TGOS"
constexpr uint32_t kVersion = 1;

void put(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t get(std::span<const uint8_t> in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace

std::vector<uint8_t> pack_state(const std::string& optimizer, int64_t steps) {
  std::vector<uint8_t> out;
  put(out, kMagic, 4);
  put(out, kVersion, 4);
  put(out, optimizer.size(), 4);
  out.insert(out.end(), optimizer.begin(), optimizer.end());
  put(out, static_cast<uint64_t>(steps), 8);
  return out;
}

int64_t unpack_state(const std::string& optimizer, std::span<const uint8_t> blob) {
  auto fail = [&](const std::string& what) -> std::invalid_argument {
    return std::invalid_argument(optimizer + " optimizer state: " + what);
  };
  if (blob.size() < 12) throw fail("blob of " + std::to_string(blob.size()) + " bytes is too short");
  if (get(blob, 0, 4) != kMagic) throw fail("bad magic");
  if (get(blob, 4, 4) != kVersion) throw fail("unsupported version " + std::to_string(get(blob, 4, 4)));
  const uint64_t name_len = get(blob, 8, 4);
  if (blob.size() != 12 + name_len + 8)
    throw fail("blob length " + std::to_string(blob.size()) + " does not match name length " +
               std::to_string(name_len));
  const std::string saved(blob.begin() + 12, blob.begin() + 12 + name_len);
  if (saved != optimizer) throw fail("blob was saved by optimizer '" + saved + "'");
  const auto steps = static_cast<int64_t>(get(blob, 12 + name_len, 8));
  if (steps < 0) throw fail("negative step count " + std::to_string(steps));
  return steps;
}

}  // namespace terngrad::train::detail
