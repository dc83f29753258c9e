// Helpers for the optimizer tests. Tensors are built field by field so the
// tests need only the optim library (numel() lives in the layers library).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "terngrad/train/layer.h"

namespace optim_test {

using terngrad::train::GradSet;
using terngrad::train::Param;
using terngrad::train::ParamSet;
using terngrad::train::Tensor;

inline Tensor tensor(terngrad::train::Shape shape, std::vector<float> values) {
  Tensor t;
  t.shape = std::move(shape);
  t.data = std::move(values);
  return t;
}

inline std::vector<float> normals(size_t n, uint64_t seed, float sigma = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Two variables, as a model would have them.
inline ParamSet small_model(uint64_t seed = 1) {
  ParamSet ps;
  ps.add(Param{"conv1/weights", tensor({3, 4}, normals(12, seed)), 0.0f, false});
  ps.add(Param{"logits/biases", tensor({5}, normals(5, seed + 1)), 0.0f, true});
  return ps;
}

// Gradients for update `step`, different every step.
inline GradSet grads_for(const ParamSet& ps, int step, float sigma = 0.5f) {
  GradSet g;
  for (size_t i = 0; i < ps.size(); ++i)
    g.push_back(tensor(ps.params[i].value.shape, normals(ps.params[i].value.data.size(), 1000 * step + i, sigma)));
  return g;
}

// Flattened copy of all parameter values, in float64, for references.
inline std::vector<std::vector<double>> as_double(const ParamSet& ps) {
  std::vector<std::vector<double>> out;
  for (const Param& p : ps.params) out.emplace_back(p.value.data.begin(), p.value.data.end());
  return out;
}

}  // namespace optim_test
