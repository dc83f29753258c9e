#include "terngrad/train/cuda/device_tensor.h"

#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

DeviceBuffer::~DeviceBuffer() {
  // No throw from a destructor: a failing cudaFree here means the context is
  // already gone (process teardown), and there is nothing left to release.
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  if (ptr_) {
    TG_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  TG_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  bytes_ = bytes;
}

void DeviceTensor::upload(const Tensor& t, cudaStream_t stream) {
  resize(t.shape);
  if (t.size() > 0)
    TG_CUDA_CHECK(cudaMemcpyAsync(ptr(), t.ptr(), t.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
}

void DeviceTensor::download(Tensor& t, cudaStream_t stream) const {
  t.resize(shape);
  if (t.size() > 0)
    TG_CUDA_CHECK(cudaMemcpyAsync(t.ptr(), ptr(), t.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
}

void DeviceTensor::zero(cudaStream_t stream) {
  if (size() > 0) TG_CUDA_CHECK(cudaMemsetAsync(ptr(), 0, size() * sizeof(float), stream));
}

DeviceTensor to_device(const Tensor& t) {
  DeviceTensor d;
  d.upload(t, nullptr);
  TG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return d;
}

Tensor to_host(const DeviceTensor& t) {
  Tensor h;
  t.download(h, nullptr);
  TG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  return h;
}

}  // namespace terngrad::train::cuda
