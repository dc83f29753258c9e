// The training loss on the GPU, train/loss.h's softmax_cross_entropy its
// reference: mean softmax cross-entropy of logits [N, C] against labels, and
// dL/dlogits = (softmax - onehot) / N.
#pragma once

#include <cstdint>

#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/device_tensor.h"

namespace terngrad::train::cuda {

// d_labels: N int32 labels on the device, already checked to lie in [0, C)
// on the host (they come from the host's data pipeline; a device-side check
// would need a synchronization to report). Writes the mean loss to *d_loss
// (device) and resizes dlogits. row_loss holds N floats of scratch.
void softmax_cross_entropy(GpuContext& ctx, const DeviceTensor& logits, const int32_t* d_labels,
                           DeviceTensor& dlogits, float* d_loss, DeviceBuffer& row_loss);

}  // namespace terngrad::train::cuda
