// The training loss and the evaluation metric of the CPU trainer.
#pragma once

#include <cstdint>
#include <span>

#include "terngrad/train/tensor.h"

namespace terngrad::train {

// Mean softmax cross-entropy of logits [N, C] against integer labels in
// [0, C) (tf.losses.sparse_softmax_cross_entropy with mean reduction).
// Writes dL/dlogits = (softmax(logits) - onehot(label)) / N into dlogits
// (resized to [N, C]). Stable for any finite logits: each row is shifted by
// its maximum before exponentiating, and sums are accumulated in double.
// Throws std::invalid_argument when the shapes disagree or a label is out of
// range. N = 0 gives 0.
float softmax_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, Tensor& dlogits);

// How many rows have their label among the k highest logits. Ties rank by
// class index (the lower index counts as higher), so the result does not
// depend on sort order or thread scheduling; a row whose label logit is NaN
// never counts. k <= 0 counts nothing.
int64_t topk_count(const Tensor& logits, std::span<const int32_t> labels, int k);

// Top-1 and top-5 counts in one pass (overwrites top1 and top5).
void topk_correct(const Tensor& logits, std::span<const int32_t> labels, int64_t& top1, int64_t& top5);

}  // namespace terngrad::train
