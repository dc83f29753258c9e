// Device memory for the GPU trainer: an RAII buffer and a float tensor with
// the CPU Tensor's shape conventions (row-major, images NHWC), so a CPU
// parameter, activation or gradient maps to a DeviceTensor element for
// element and can be copied either way and compared.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "terngrad/train/tensor.h"

namespace terngrad::train::cuda {

// Owns `bytes` of device memory (cudaMalloc / cudaFree). Grows on reserve();
// never shrinks, so steady-state steps allocate nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { reserve(bytes); }
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  // Makes capacity >= bytes. Contents are NOT preserved when it grows.
  void reserve(size_t bytes);
  void* data() const { return ptr_; }
  size_t capacity() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

struct DeviceTensor {
  Shape shape;
  DeviceBuffer buf;

  DeviceTensor() = default;
  explicit DeviceTensor(const Shape& s) { resize(s); }

  int64_t size() const { return numel(shape); }
  float* ptr() { return buf.as<float>(); }
  const float* ptr() const { return buf.as<float>(); }
  void resize(const Shape& s) {
    shape = s;
    buf.reserve(static_cast<size_t>(numel(s)) * sizeof(float));
  }
  // Asynchronous on `stream`; the host side must stay alive until the stream
  // reaches the copy (pageable host memory makes these effectively synchronous).
  void upload(const Tensor& t, cudaStream_t stream);
  void download(Tensor& t, cudaStream_t stream) const;  // resizes t
  void zero(cudaStream_t stream);
};

// Synchronous conveniences for tests and set-up code. They run on the legacy
// default stream, which the GPU contexts' non-blocking streams do not wait
// for: synchronize the context that produced a tensor before to_host().
DeviceTensor to_device(const Tensor& t);
Tensor to_host(const DeviceTensor& t);

}  // namespace terngrad::train::cuda
