#include <stdexcept>

#include "terngrad/train/datasets.h"

namespace terngrad::train {

void check_dataset(const Dataset& d, const std::string& what) {
  auto fail = [&](const std::string& msg) { throw std::invalid_argument(what + ": " + msg); };
  if (d.count < 0 || d.height <= 0 || d.width <= 0 || d.channels <= 0)
    fail("bad geometry: count " + std::to_string(d.count) + ", " + std::to_string(d.height) + "x" +
         std::to_string(d.width) + "x" + std::to_string(d.channels));
  const uint64_t expect = static_cast<uint64_t>(d.count) * static_cast<uint64_t>(d.image_bytes());
  if (d.images.size() != expect)
    fail("holds " + std::to_string(d.images.size()) + " image bytes, expected count * h * w * c = " +
         std::to_string(expect));
  if (d.labels.size() != static_cast<size_t>(d.count))
    fail("holds " + std::to_string(d.labels.size()) + " labels for " + std::to_string(d.count) + " images");
  if (d.num_classes <= 0) fail("num_classes is " + std::to_string(d.num_classes));
  for (size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] < 0 || d.labels[i] >= d.num_classes)
      fail("label " + std::to_string(d.labels[i]) + " at index " + std::to_string(i) + " is outside [0, " +
           std::to_string(d.num_classes) + ")");
  if (!d.shard.empty()) {
    if (d.shard.size() != static_cast<size_t>(d.count))
      fail("holds " + std::to_string(d.shard.size()) + " shard entries for " + std::to_string(d.count) + " images");
    for (size_t i = 0; i < d.shard.size(); ++i)
      if (d.shard[i] < 0 || static_cast<size_t>(d.shard[i]) >= d.shard_files.size())
        fail("shard " + std::to_string(d.shard[i]) + " at index " + std::to_string(i) + " is outside [0, " +
             std::to_string(d.shard_files.size()) + ")");
  }
}

}  // namespace terngrad::train
