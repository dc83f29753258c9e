#include "terngrad/train/loss.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace terngrad::train {

namespace {

void check_logits(const char* fn, const Tensor& logits, std::span<const int32_t> labels) {
  if (logits.shape.size() != 2)
    throw std::invalid_argument(std::string(fn) + ": logits " + shape_string(logits.shape) + " are not [N, C]");
  if (static_cast<int64_t>(labels.size()) != logits.shape[0])
    throw std::invalid_argument(std::string(fn) + ": " + std::to_string(labels.size()) + " labels for logits " +
                                shape_string(logits.shape));
}

}  // namespace

float softmax_cross_entropy(const Tensor& logits, std::span<const int32_t> labels, Tensor& dlogits) {
  check_logits("softmax_cross_entropy", logits, labels);
  const int64_t n = logits.shape[0], c = logits.shape[1];
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= c)
      throw std::invalid_argument("softmax_cross_entropy: label " + std::to_string(labels[i]) + " of row " +
                                  std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  }
  dlogits.resize(logits.shape);
  if (n == 0) return 0.0f;
  const double inv_n = 1.0 / static_cast<double>(n);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float* z = logits.ptr() + i * c;
    float* g = dlogits.ptr() + i * c;
    // log softmax(z)_j = (z_j - m) - log(sum_k exp(z_k - m)) with m = max z:
    // every exponent is <= 0, so nothing overflows, and the largest is 1, so
    // the sum is >= 1 and its log is finite.
    float m = z[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, z[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      const float e = std::exp(z[j] - m);
      g[j] = e;
      sum += e;
    }
    const double log_sum = std::log(sum);
    total += log_sum - (static_cast<double>(z[labels[i]]) - m);
    const double scale = inv_n / sum;
    for (int64_t j = 0; j < c; ++j) g[j] = static_cast<float>(g[j] * scale);
    g[labels[i]] -= static_cast<float>(inv_n);
  }
  return static_cast<float>(total * inv_n);
}

namespace {

// The label's rank among the row's logits: classes strictly above it, plus
// equal ones with a lower index. -1 when the label logit is NaN (never counts).
int64_t label_rank(const float* z, int64_t c, int32_t label) {
  const float zl = z[label];
  if (std::isnan(zl)) return -1;
  int64_t rank = 0;
  for (int64_t j = 0; j < c; ++j) rank += (z[j] > zl) || (z[j] == zl && j < label);
  return rank;
}

void check_labels(const char* fn, std::span<const int32_t> labels, int64_t c) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0 || labels[i] >= c)
      throw std::invalid_argument(std::string(fn) + ": label " + std::to_string(labels[i]) + " of row " +
                                  std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  }
}

}  // namespace

int64_t topk_count(const Tensor& logits, std::span<const int32_t> labels, int k) {
  check_logits("topk_count", logits, labels);
  const int64_t n = logits.shape[0], c = logits.shape[1];
  check_labels("topk_count", labels, c);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = label_rank(logits.ptr() + i * c, c, labels[i]);
    count += r >= 0 && r < k;
  }
  return count;
}

void topk_correct(const Tensor& logits, std::span<const int32_t> labels, int64_t& top1, int64_t& top5) {
  check_logits("topk_correct", logits, labels);
  const int64_t n = logits.shape[0], c = logits.shape[1];
  check_labels("topk_correct", labels, c);
  top1 = top5 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = label_rank(logits.ptr() + i * c, c, labels[i]);
    top1 += r == 0;
    top5 += r >= 0 && r < 5;
  }
}

}  // namespace terngrad::train
