// Error checks for the GPU trainer: every CUDA, cuBLAS and cuDNN call goes
// through one of these macros, which throw std::runtime_error naming the
// library's status string, the failed expression and file:line, so a failure
// on a remote GPU machine is diagnosable from the log alone.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace terngrad::train::cuda {

[[noreturn]] void throw_gpu_error(const char* library, const std::string& status, const char* expr, const char* file,
                                  int line);
const char* cublas_status_string(cublasStatus_t s);

}  // namespace terngrad::train::cuda

#define TG_CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                        \
    const cudaError_t tg_err_ = (expr);                                                                       \
    if (tg_err_ != cudaSuccess)                                                                               \
      ::terngrad::train::cuda::throw_gpu_error("CUDA", cudaGetErrorString(tg_err_), #expr, __FILE__, __LINE__); \
  } while (0)

#define TG_CUBLAS_CHECK(expr)                                                                              \
  do {                                                                                                     \
    const cublasStatus_t tg_st_ = (expr);                                                                  \
    if (tg_st_ != CUBLAS_STATUS_SUCCESS)                                                                   \
      ::terngrad::train::cuda::throw_gpu_error("cuBLAS", ::terngrad::train::cuda::cublas_status_string(tg_st_), \
                                               #expr, __FILE__, __LINE__);                                 \
  } while (0)

#define TG_CUDNN_CHECK(expr)                                                                                     \
  do {                                                                                                           \
    const cudnnStatus_t tg_st_ = (expr);                                                                         \
    if (tg_st_ != CUDNN_STATUS_SUCCESS)                                                                          \
      ::terngrad::train::cuda::throw_gpu_error("cuDNN", cudnnGetErrorString(tg_st_), #expr, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, at the
// launch, rather than at some later unrelated call.
#define TG_CUDA_CHECK_LAUNCH() TG_CUDA_CHECK(cudaGetLastError())
