// Learning-rate schedules with TensorFlow 1.x semantics (tf.train.*_decay).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace terngrad::train {

struct LrScheduleOptions {
  double initial = 0.01;     // learning rate at step 0
  double decay_steps = 0;    // polynomial, exponential: > 0
  double decay_rate = 0.1;   // exponential: > 0
  double end = 0.0;          // polynomial: final learning rate
  double power = 1.0;        // polynomial: >= 0
  bool staircase = false;    // exponential: decay in whole periods
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The learning rate used for the update at global step `step` (0-based).
  virtual double lr(int64_t step) const = 0;
  // e.g. "polynomial(initial=0.01, end=0, decay_steps=1000, power=0.5)".
  virtual std::string describe() const = 0;
};

// "fixed": initial.
// "polynomial": (initial - end) * (1 - min(step, decay_steps) / decay_steps)^power + end.
// "exponential": initial * decay_rate^(step / decay_steps), the exponent
//   floored when staircase.
// Throws std::invalid_argument naming the schedule, option and value.
std::unique_ptr<LrSchedule> make_lr_schedule(std::string_view name, const LrScheduleOptions& options);

}  // namespace terngrad::train
