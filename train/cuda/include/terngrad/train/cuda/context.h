// One stream with its cuBLAS and cuDNN handles and a growable workspace: what
// a virtual worker needs to run the GPU layers. Each virtual worker owns one,
// so workers' kernels can overlap on the device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "terngrad/train/cuda/device_tensor.h"

namespace terngrad::train::cuda {

// True when cudaGetDeviceCount reports at least one usable device. Never
// throws: the answer to "is there a GPU" is part of normal control flow.
bool gpu_available();
// A sentence for error messages and test skips ("no CUDA device: ...").
std::string gpu_unavailable_reason();

// Number of CUDA devices (0 when none can be used).
int gpu_count();

// An environment switch read once per call site: unset, empty or `off`
// gives false, `on` true; any other value throws std::invalid_argument
// naming the variable, both accepted values and the one given.
bool env_switch(const char* name, const char* off, const char* on);

// TG_GPU_TF32=1: convolutions (cuDNN) and GEMMs (cuBLAS) may round their fp32
// inputs to TF32 on tensor cores, as PyTorch's cuDNN convolutions do by
// default. Off (unset or 0) by default: the GPU layers then match the CPU
// layers to 1e-4 relative, which TF32's 10-bit mantissa does not. Read once;
// any other value throws std::invalid_argument naming it.
bool tf32_enabled();

// Makes `device` the calling thread's current CUDA device for the scope and
// restores the previous one: streams, handles and allocations are created on
// the current device, and kernels launch there.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class GpuContext {
 public:
  GpuContext();
  ~GpuContext();
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // Scratch memory shared by the calls on this stream (cuDNN workspaces):
  // calls on one stream run in order, so one buffer serves all of them.
  void* workspace(size_t bytes) {
    workspace_.reserve(bytes);
    return workspace_.data();
  }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace terngrad::train::cuda
