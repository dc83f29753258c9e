// Writing a whole file so that readers never see half of it: the bytes go to
// a temporary file beside the target, are fsync'ed, and are renamed over it
// (the trainer's checkpoints and exports use the same mechanism).
#pragma once

#include <string>
#include <string_view>

namespace terngrad::train {

// Throws std::runtime_error naming the path and the failing step.
void write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace terngrad::train
