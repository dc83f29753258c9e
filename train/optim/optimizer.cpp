// Slot bookkeeping, argument checks and state blobs shared by all optimizers;
// the update rules live in one file per optimizer.
#include "terngrad/train/optimizer.h"

#include <stdexcept>

#include "state_blob.h"
#include "terngrad/train/element_range.h"

namespace terngrad::train {

void Optimizer::init(const ParamSet& params) {
  if (initialized_) {
    bool same = params.size() == names_.size();
    for (size_t i = 0; same && i < params.size(); ++i)
      same = params.params[i].name == names_[i] && params.params[i].value.size() == sizes_[i];
    if (!same)
      throw std::invalid_argument(name() + " optimizer: init() called again with different parameters (" +
                                  std::to_string(params.size()) + " vs " + std::to_string(names_.size()) + ")");
    return;
  }
  specs_ = slot_specs();
  if (specs_.size() > kMaxSlots)
    throw std::logic_error(name() + " optimizer: more than " + std::to_string(kMaxSlots) + " slots per parameter");
  const std::vector<SlotSpec>& specs = specs_;
  names_.clear();
  sizes_.clear();
  slots_.assign(params.size(), {});
  for (size_t i = 0; i < params.size(); ++i) {
    const Param& p = params.params[i];
    names_.push_back(p.name);
    sizes_.push_back(p.value.size());
    for (const SlotSpec& s : specs) {
      Tensor t;  // built field by field: shape copied, no numel() needed
      t.shape = p.value.shape;
      t.data.assign(p.value.data.size(), s.initial);
      slots_[i].push_back(std::move(t));
    }
  }
  initialized_ = true;
}

void Optimizer::check_variable(const ParamSet& params, const GradSet& grads, size_t i) const {
  const Param& p = params.params[i];
  if (grads[i].size() != p.value.size())
    throw std::invalid_argument(name() + " optimizer: gradient of '" + p.name + "' has " +
                                std::to_string(grads[i].size()) + " elements, the parameter " +
                                std::to_string(p.value.size()));
  for (size_t k = 0; k < specs_.size(); ++k)
    if (slots_[i][k].size() != p.value.size())
      throw std::invalid_argument(name() + " optimizer: slot '" + p.name + "/" + specs_[k].suffix + "' has " +
                                  std::to_string(slots_[i][k].size()) + " elements, the parameter " +
                                  std::to_string(p.value.size()));
}

void Optimizer::check_count(const ParamSet& params, const GradSet& grads) const {
  if (grads.size() != params.size())
    throw std::invalid_argument(name() + " optimizer: " + std::to_string(grads.size()) + " gradients for " +
                                std::to_string(params.size()) + " parameters");
}

void Optimizer::update_range(ParamSet& params, const GradSet& grads, size_t i, int64_t begin, int64_t count,
                             float lr) {
  const auto b = static_cast<size_t>(begin), n = static_cast<size_t>(count);
  update_elements(i, b, std::span<float>(params.params[i].value.data).subspan(b, n),
                  std::span<const float>(grads[i].data).subspan(b, n), lr);
}

void Optimizer::update_elements(size_t i, size_t begin, std::span<float> w, std::span<const float> g, float lr) {
  std::span<float> slot_spans[kMaxSlots];  // no allocation per step
  for (size_t k = 0; k < specs_.size(); ++k)
    slot_spans[k] = std::span<float>(slots_[i][k].data).subspan(begin, w.size());
  update(w, g, std::span(slot_spans, specs_.size()), lr, steps_ + 1);
}

void Optimizer::apply(ParamSet& params, const GradSet& grads, float lr) {
  init(params);
  check_count(params, grads);
  if (!applied_.empty())
    throw std::logic_error(name() + " optimizer: apply() in the middle of a step applied by variable");
  for (size_t i = 0; i < params.size(); ++i) check_variable(params, grads, i);
  for (size_t i = 0; i < params.size(); ++i) update_range(params, grads, i, 0, params.params[i].value.size(), lr);
  ++steps_;
}

void Optimizer::apply_range(ParamSet& params, const GradSet& grads, size_t i, int64_t begin, int64_t count,
                            float lr) {
  if (applied_.empty()) init(params);  // the whole set, once a step (names compared)
  check_count(params, grads);
  if (i >= params.size())
    throw std::invalid_argument(name() + " optimizer: apply_range(" + std::to_string(i) + ") of " +
                                std::to_string(params.size()) + " parameters");
  check_variable(params, grads, i);
  const int64_t size = params.params[i].value.size();
  check_element_range(name() + " optimizer: apply_range", "'" + params.params[i].name + "'", begin, count, size);
  if (applied_.empty()) applied_.assign(params.size(), 0);
  if (count > size - applied_[i])
    throw std::logic_error(name() + " optimizer: '" + params.params[i].name + "' applied twice in step " +
                           std::to_string(steps_ + 1) + " (" + std::to_string(applied_[i]) + " of " +
                           std::to_string(size) + " elements applied, " + std::to_string(count) + " more)");
  update_range(params, grads, i, begin, count, lr);
  applied_[i] += count;
}

void Optimizer::apply_variable(ParamSet& params, const GradSet& grads, size_t i, float lr) {
  apply_range(params, grads, i, 0, i < params.size() ? params.params[i].value.size() : 0, lr);
}

void Optimizer::apply_to(std::span<float> w, std::span<const float> g, float lr) {
  if (sizes_.size() != 1)
    throw std::invalid_argument(name() + " optimizer: apply_to needs one parameter, it holds " +
                                std::to_string(sizes_.size()));
  if (static_cast<int64_t>(w.size()) != sizes_[0] || g.size() != w.size())
    throw std::invalid_argument(name() + " optimizer: apply_to of '" + names_[0] + "' (" + std::to_string(sizes_[0]) +
                                " elements) with " + std::to_string(w.size()) + " values and " +
                                std::to_string(g.size()) + " gradients");
  if (!applied_.empty())
    throw std::logic_error(name() + " optimizer: apply_to() in the middle of a step applied by variable");
  for (size_t k = 0; k < specs_.size(); ++k)
    if (static_cast<int64_t>(slots_[0][k].data.size()) != sizes_[0])
      throw std::invalid_argument(name() + " optimizer: a slot of '" + names_[0] + "' was resized");
  update_elements(0, 0, w, g, lr);
  ++steps_;
}

void Optimizer::finish_step() {
  if (applied_.empty()) throw std::logic_error(name() + " optimizer: finish_step() with no variable applied");
  for (size_t i = 0; i < applied_.size(); ++i)
    if (applied_[i] != sizes_[i])
      throw std::logic_error(name() + " optimizer: finish_step() before '" + names_[i] + "' was applied (" +
                             std::to_string(applied_[i]) + " of " + std::to_string(sizes_[i]) + " elements)");
  applied_.clear();
  ++steps_;
}

std::vector<std::pair<std::string, Tensor*>> Optimizer::slots() {
  std::vector<std::pair<std::string, Tensor*>> out;
  if (!initialized_) return out;
  const std::vector<SlotSpec>& specs = specs_;
  for (size_t i = 0; i < slots_.size(); ++i)
    for (size_t k = 0; k < specs.size(); ++k) out.emplace_back(names_[i] + "/" + specs[k].suffix, &slots_[i][k]);
  return out;
}

std::vector<uint8_t> Optimizer::save_state() const { return detail::pack_state(name(), steps_); }

void Optimizer::load_state(std::span<const uint8_t> blob) {
  steps_ = detail::unpack_state(name(), blob);
  applied_.clear();  // a step applied by variable and abandoned (a sync run's rewind) is forgotten
}

}  // namespace terngrad::train
