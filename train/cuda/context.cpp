#include "terngrad/train/cuda/context.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

bool env_switch(const char* name, const char* off, const char* on) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0' || std::string(v) == off) return false;
  if (std::string(v) == on) return true;
  throw std::invalid_argument(std::string(name) + ": expected " + off + " or " + on + ", got '" + v + "'");
}

bool tf32_enabled() {
  static const bool on = env_switch("TG_GPU_TF32", "0", "1");
  return on;
}

bool gpu_available() { return gpu_count() > 0; }

std::string gpu_unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
  if (n == 0) return "cudaGetDeviceCount found no device";
  return "";
}

DeviceGuard::DeviceGuard(int device) {
  TG_CUDA_CHECK(cudaGetDevice(&previous_));
  if (device != previous_) TG_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int current = previous_;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

GpuContext::GpuContext() {
  TG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TG_CUBLAS_CHECK(cublasCreate(&cublas_));
  TG_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  // Plain fp32 FMA GEMMs (DEFAULT_MATH: no TF32 unless asked for): the GPU layers are checked against the
  // CPU layers to 1e-4 relative, which TF32's 10-bit mantissa would not meet.
  TG_CUBLAS_CHECK(cublasSetMathMode(cublas_, tf32_enabled() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  TG_CUDNN_CHECK(cudnnCreate(&cudnn_));
  TG_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
}

GpuContext::~GpuContext() {
  if (cudnn_) cudnnDestroy(cudnn_);
  if (cublas_) cublasDestroy(cublas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void GpuContext::synchronize() const { TG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace terngrad::train::cuda
