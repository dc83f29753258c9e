// Export of trained weights in the safetensors format
// (https://github.com/huggingface/safetensors), readable by
// safetensors.torch.load_file / safetensors.numpy.load_file.
//
// Layout: 8-byte little-endian header length N; N bytes of UTF-8 JSON
//   {"__metadata__": {"k": "v", ...},
//    "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
// padded with spaces so the data starts 8-byte aligned; then the tensors'
// little-endian bytes back to back (offsets relative to the data start, no
// holes), in the order given.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/train/tensor.h"

namespace terngrad::train {

// Writes atomically (temporary file + fsync + rename). Names must be
// non-empty, unique and not "__metadata__"; each tensor's data must match its
// shape (std::invalid_argument naming the tensor otherwise).
void export_safetensors(const std::string& path, const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                        const std::map<std::string, std::string>& metadata = {});
void export_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::string> names;  // in header order
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t header_length = 0;  // N
};

// Reads a safetensors file of F32 tensors, checking the header strictly
// (JSON syntax, dtype, shape vs offsets, offsets within and covering the data
// section); errors name the file and the tensor.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace terngrad::train
