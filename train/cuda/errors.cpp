#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

void throw_gpu_error(const char* library, const std::string& status, const char* expr, const char* file, int line) {
  throw std::runtime_error(std::string(library) + " error " + status + " in " + expr + " at " + file + ":" +
                           std::to_string(line));
}

const char* cublas_status_string(cublasStatus_t s) {
  // cublasGetStatusString exists since CUDA 11.4; kept behind one function so
  // the macro does not depend on it.
  return cublasGetStatusString(s);
}

}  // namespace terngrad::train::cuda
