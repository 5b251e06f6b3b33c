#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>

#include "ops/optimizer_update.h"

namespace tessera::optim {

Adafactor::Factors Adafactor::factors_of(const nn::Parameter& p) {
  const Shape& shape = p.spec.global_shape;
  const int64_t numel = shape_numel(shape);
  Factors f;
  if (shape.size() < 2 || p.role != nn::ParameterRole::Weight) {
    f.group_size = shape.empty() ? 1 : shape.back();
    f.groups = numel / f.group_size;
    return f;
  }
  f.rows = shape[shape.size() - 2];
  f.cols = shape.back();
  f.matrices = numel / (f.rows * f.cols);
  f.groups = f.matrices;
  f.group_size = f.rows * f.cols;
  return f;
}

namespace {

// The elements of one group (a matrix, a bias's vector) of the one-process tensor: its global shape
// without the padding rows a vocabulary split adds (an RMS is over these), over its groups.
double group_numel(const nn::Parameter& p, const Adafactor::Factors& f) {
  return static_cast<double>(shape_numel(p.spec.unpadded_shape())) / static_cast<double>(f.groups);
}

std::vector<int64_t> statistics_slots(const nn::ParameterStore& store) {
  std::vector<int64_t> slots;
  for (const nn::Parameter& p : store.all()) {
    const Adafactor::Factors f = Adafactor::factors_of(p);
    slots.push_back(f.state_floats() + f.groups);
  }
  return slots;
}

std::vector<int64_t> update_slots(const nn::ParameterStore& store) {
  std::vector<int64_t> slots;
  for (const nn::Parameter& p : store.all()) slots.push_back(Adafactor::factors_of(p).groups);
  return slots;
}

ops::AdafactorLayout layout_of(const Adafactor::Factors& f) {
  return {f.matrices, f.rows, f.cols, f.groups, f.group_size};
}

// Where a segment's elements lie in the whole tensor: runs of them consecutive there, padding
// elements left out (they add to no statistic and stay zero).
std::vector<ops::ElementRun> element_runs(const Segment& s) {
  const nn::ShardSpec& spec = s.param->spec;
  std::vector<ops::ElementRun> runs;
  for (int64_t i = 0; i < s.size(); ++i) {
    const int64_t element = spec.global_index(s.begin + i);
    if (spec.is_padding(element)) continue;
    if (!runs.empty()) {
      ops::ElementRun& last = runs.back();
      if (last.local + last.length == i && last.global + last.length == element) {
        ++last.length;
        continue;
      }
    }
    runs.push_back({i, element, 1});
  }
  return runs;
}

}  // namespace

Adafactor::Adafactor(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
                     std::span<const Segment> layout, const ShardReduction* reduction)
    : config_(config),
      reduction_(reduction),
      layout_(layout.begin(), layout.end()),
      owned_(total_elements(layout)),
      sums_(statistics_slots(store)),
      updates_(update_slots(store)) {
  TS_CHECK(config.decay_rate > 0.0f && config.decay_rate <= 1.0f,
           "Adafactor: decay_rate = {} must be in (0, 1] (β2 at step t is 1 − t^−decay_rate)", config.decay_rate);
  TS_CHECK(config.clip_threshold > 0.0f, "Adafactor: clip_threshold must be positive, got {}", config.clip_threshold);
  TS_CHECK(!config.first_moment || (config.beta1 >= 0.0f && config.beta1 < 1.0f),
           "Adafactor: beta1 = {} must be in [0, 1)", config.beta1);
  row_at_ = col_at_ = v_at_ = {0};
  for (const Segment& s : layout_) {
    const Factors f = factors_of(*s.param);
    row_at_.push_back(row_at_.back() + f.matrices * f.rows);
    col_at_.push_back(col_at_.back() + f.matrices * f.cols);
    v_at_.push_back(v_at_.back() + (f.factored() ? 0 : s.size()));
    runs_.push_back(element_runs(s));
  }
  row_ = Tensor::zeros({row_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  col_ = Tensor::zeros({col_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({v_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  if (config.first_moment) m_ = Tensor::zeros({owned_}, DType::F32, MemoryTag::Optimizer, memory);
}

void Adafactor::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(same_layout(segments, layout_),
           "Adafactor: the segments differ from those its state was built for: the owned elements changed");
  ++step_;
  const double beta2 = 1.0 - std::pow(double(step_), -double(config_.decay_rate));
  const auto new_weight = static_cast<float>(1.0 - beta2), old_weight = static_cast<float>(beta2);

  // Row and column sums of G² + ε1 (or nothing, for an unfactored tensor) and Σ W², over the
  // whole tensor: each rank adds its runs' terms, and the sums are reduced over the ranks holding
  // the tensor's other blocks and shards.
  sums_.clear();
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    const std::span<double> sums = sums_.of(*s.param);
    const auto rows = static_cast<size_t>(f.matrices * f.rows), cols = static_cast<size_t>(f.matrices * f.cols);
    ops::adafactor_sums(s.values(), s.grads(), runs_[k], layout_of(f), kEps1, sums.first(rows),
                        sums.subspan(rows, cols), sums.subspan(rows + cols));
  }
  sums_.reduce(reduction_, segments);

  // The second moment: R and C of the whole matrix (the same on every holder) and ΣR of each of a
  // segment's matrices, or V per element.
  std::vector<std::vector<double>> row_totals(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    if (f.factored()) {
      const std::span<const double> sums = sums_.of(*s.param);
      const auto rows = static_cast<size_t>(f.matrices * f.rows), cols = static_cast<size_t>(f.matrices * f.cols);
      row_totals[k].resize(static_cast<size_t>(f.matrices));
      ops::adafactor_factored_moment(row_of(k), col_of(k), sums.first(rows), sums.subspan(rows, cols), layout_of(f),
                                     old_weight, new_weight, row_totals[k]);
    } else {
      ops::adafactor_vector_moment(v_of(k), s.grads(), old_weight, new_weight, static_cast<float>(kEps1));
    }
  }

  // Σ U² per group, U = G / √V̂.
  updates_.clear();
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    if (f.factored()) {
      ops::adafactor_factored_update_squares(s.grads(), row_of(k), col_of(k), row_totals[k], runs_[k], layout_of(f),
                                             updates_.of(*s.param));
    } else {
      ops::adafactor_vector_update_squares(s.grads(), v_of(k), runs_[k], layout_of(f), updates_.of(*s.param));
    }
  }
  updates_.reduce(reduction_, segments);

  // Each group's clip, rate and decay from its RMS(U) and RMS(W), then the update.
  int64_t at = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    const double numel = group_numel(*s.param, f);
    const std::span<const double> update_squares = updates_.of(*s.param);
    const std::span<const double> weight_squares = sums_.of(*s.param).subspan(static_cast<size_t>(f.state_floats()));
    const double weight_decay = is_weight(*s.param) ? double(config_.weight_decay) : 0.0;
    std::vector<ops::AdafactorGroupStep> groups(static_cast<size_t>(f.groups));
    for (size_t group = 0; group < groups.size(); ++group) {
      const double update_rms = std::sqrt(update_squares[group] / numel);
      const double clip = std::max(1.0, update_rms / double(config_.clip_threshold));
      double alpha = lr;
      if (config_.relative_step) alpha *= std::max(kEps2, std::sqrt(weight_squares[group] / numel));
      const double decay = 1.0 - alpha * weight_decay;
      groups[group] = {clip, alpha, decay};
    }
    const Tensor m = config_.first_moment ? m_.slice(0, at, at + s.size()) : Tensor();
    if (f.factored()) {
      ops::adafactor_factored_apply(s.values(), s.grads(), m, row_of(k), col_of(k), row_totals[k], runs_[k],
                                    layout_of(f), groups, config_.beta1);
    } else {
      ops::adafactor_vector_apply(s.values(), s.grads(), m, v_of(k), runs_[k], layout_of(f), groups, config_.beta1);
    }
    at += s.size();
  }
}

Tensor Adafactor::row_of(size_t k) const { return row_.slice(0, row_at_[k], row_at_[k + 1]); }
Tensor Adafactor::col_of(size_t k) const { return col_.slice(0, col_at_[k], col_at_[k + 1]); }
Tensor Adafactor::v_of(size_t k) const { return v_.slice(0, v_at_[k], v_at_[k + 1]); }

StateDict Adafactor::state_dict() {
  StateDict out{step_, {{"row", row_, row_at_}, {"col", col_, col_at_}, {"v", v_, v_at_}}};
  if (config_.first_moment) out.tensors.push_back({"m", m_, {}});
  return out;
}

void Adafactor::load_state_dict(StateDict state) {
  load_state_tensor(state, "row", row_, name());
  load_state_tensor(state, "col", col_, name());
  load_state_tensor(state, "v", v_, name());
  if (config_.first_moment) load_state_tensor(state, "m", m_, name());
  step_ = state.steps;
}

}  // namespace tessera::optim
