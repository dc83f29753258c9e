// Learning-rate schedules: tf.train.polynomial_decay (cycle=False) and
// tf.train.exponential_decay, plus a constant. Computed in double from the
// integer step, so the rate at step k does not depend on how many steps ran
// before it in this process (resumed runs see the same rates).
#include "terngrad/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "option_check.h"

namespace terngrad::train {

namespace {

// "<name> learning-rate schedule: <option> = <value> is out of range (<rule>)"
void require(bool ok, std::string_view schedule, const char* option, double value, const char* rule) {
  detail::require_option(ok, std::string(schedule) + " learning-rate schedule", option, value, rule);
}

class Fixed final : public LrSchedule {
 public:
  explicit Fixed(double lr) : lr_(lr) {}
  double lr(int64_t) const override { return lr_; }
  std::string describe() const override { return "fixed(" + detail::option_number(lr_) + ")"; }

 private:
  double lr_;
};

class Polynomial final : public LrSchedule {
 public:
  explicit Polynomial(const LrScheduleOptions& o) : o_(o) {}
  double lr(int64_t step) const override {
    const double s = std::min(static_cast<double>(std::max<int64_t>(step, 0)), o_.decay_steps);
    return (o_.initial - o_.end) * std::pow(1.0 - s / o_.decay_steps, o_.power) + o_.end;
  }
  std::string describe() const override {
    return "polynomial(initial=" + detail::option_number(o_.initial) + ", end=" + detail::option_number(o_.end) + ", decay_steps=" +
           detail::option_number(o_.decay_steps) + ", power=" + detail::option_number(o_.power) + ")";
  }

 private:
  LrScheduleOptions o_;
};

class Exponential final : public LrSchedule {
 public:
  explicit Exponential(const LrScheduleOptions& o) : o_(o) {}
  double lr(int64_t step) const override {
    double p = static_cast<double>(std::max<int64_t>(step, 0)) / o_.decay_steps;
    if (o_.staircase) p = std::floor(p);
    return o_.initial * std::pow(o_.decay_rate, p);
  }
  std::string describe() const override {
    return "exponential(initial=" + detail::option_number(o_.initial) + ", decay_rate=" + detail::option_number(o_.decay_rate) +
           ", decay_steps=" + detail::option_number(o_.decay_steps) + (o_.staircase ? ", staircase)" : ")");
  }

 private:
  LrScheduleOptions o_;
};

}  // namespace

std::unique_ptr<LrSchedule> make_lr_schedule(std::string_view name, const LrScheduleOptions& o) {
  const auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  if (name == "fixed" || name == "polynomial" || name == "exponential")
    require(finite_nonneg(o.initial), name, "initial", o.initial, "finite, >= 0");
  if (name == "fixed") return std::make_unique<Fixed>(o.initial);
  if (name == "polynomial") {
    require(std::isfinite(o.decay_steps) && o.decay_steps > 0, name, "decay_steps", o.decay_steps, "finite, > 0");
    require(finite_nonneg(o.end), name, "end", o.end, "finite, >= 0");
    require(finite_nonneg(o.power), name, "power", o.power, "finite, >= 0");
    return std::make_unique<Polynomial>(o);
  }
  if (name == "exponential") {
    require(std::isfinite(o.decay_steps) && o.decay_steps > 0, name, "decay_steps", o.decay_steps, "finite, > 0");
    require(std::isfinite(o.decay_rate) && o.decay_rate > 0, name, "decay_rate", o.decay_rate, "finite, > 0");
    return std::make_unique<Exponential>(o);
  }
  throw std::invalid_argument("unknown learning-rate schedule '" + std::string(name) +
                              "'; known: fixed, polynomial, exponential");
}

}  // namespace terngrad::train
