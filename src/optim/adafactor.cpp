#include "optim/adafactor.h"

#include <algorithm>
#include <cmath>

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

  // Row and column sums of G² + ε1 (or nothing, for an unfactored tensor) and Σ W².
  // Rows and columns are the whole tensor's: a tensor-parallel block's element goes to its global
  // row and column, so that the sums over the group add each row's terms from every block that holds
  // part of it (and a ZeRO shard's, from every shard). Padding rows add nothing.
  sums_.clear();
  for (const Segment& s : segments) {
    const Factors f = factors_of(*s.param);
    const nn::ShardSpec& spec = s.param->spec;
    std::span<double> sums = sums_.of(*s.param);
    const int64_t rows = f.matrices * f.rows, w_at = f.state_floats();
    for (int64_t i = 0; i < s.size(); ++i) {
      const int64_t element = spec.global_index(s.begin + i);
      if (spec.is_padding(element)) continue;
      sums[static_cast<size_t>(w_at + f.group_of(element))] += double(s.value[i]) * double(s.value[i]);
      if (f.factored()) {
        const double square = double(s.grad[i]) * double(s.grad[i]) + kEps1;
        sums[static_cast<size_t>(element / f.cols)] += square;
        sums[static_cast<size_t>(rows + f.group_of(element) * f.cols + element % f.cols)] += square;
      }
    }
  }
  sums_.reduce(reduction_, segments);

  // The second moment: R and C of the whole matrix (the same on every holder), or V per element.
  float* row = row_.data<float>();
  float* col = col_.data<float>();
  float* v = v_.data<float>();
  // ΣR of each segment's matrices, in their order.
  std::vector<std::vector<double>> row_total(segments.size());
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    if (f.factored()) {
      std::span<const double> sums = sums_.of(*s.param);
      float* r = row + row_at_[k];
      float* c = col + col_at_[k];
      const int64_t rows = f.matrices * f.rows;
      row_total[k].assign(static_cast<size_t>(f.matrices), 0.0);
      for (int64_t i = 0; i < rows; ++i) {
        r[i] = old_weight * r[i] + new_weight * static_cast<float>(sums[size_t(i)]);
        row_total[k][static_cast<size_t>(i / f.rows)] += r[i];
      }
      for (int64_t j = 0; j < f.matrices * f.cols; ++j) {
        c[j] = old_weight * c[j] + new_weight * static_cast<float>(sums[size_t(rows + j)]);
      }
    } else {
      float* vs = v + v_at_[k];
      for (int64_t i = 0; i < s.size(); ++i) {
        const float square = s.grad[i] * s.grad[i] + static_cast<float>(kEps1);
        vs[i] = old_weight * vs[i] + new_weight * square;
      }
    }
  }
  // U = G / √V̂, the same expression in both passes below (padding elements take none).
  auto unclipped = [&](size_t k, const Segment& s, const Factors& f, int64_t i) {
    double second;
    if (f.factored()) {
      const int64_t element = s.param->spec.global_index(s.begin + i);
      const int64_t matrix = f.group_of(element);
      second = double(row[row_at_[k] + element / f.cols]) * double(col[col_at_[k] + matrix * f.cols + element % f.cols]) /
               row_total[k][static_cast<size_t>(matrix)];
    } else {
      second = double(v[v_at_[k] + i]);
    }
    return double(s.grad[i]) / std::sqrt(second);
  };

  updates_.clear();
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    std::span<double> squares = updates_.of(*s.param);
    for (int64_t i = 0; i < s.size(); ++i) {
      const int64_t element = s.param->spec.global_index(s.begin + i);
      if (s.param->spec.is_padding(element)) continue;
      const double u = unclipped(k, s, f, i);
      squares[static_cast<size_t>(f.group_of(element))] += u * u;
    }
  }
  updates_.reduce(reduction_, segments);

  float* m = config_.first_moment ? m_.data<float>() : nullptr;
  const auto b1 = static_cast<double>(config_.beta1);
  int64_t at = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const Factors f = factors_of(*s.param);
    const double numel = group_numel(*s.param, f);
    const std::span<const double> update_squares = updates_.of(*s.param);
    const std::span<const double> weight_squares = sums_.of(*s.param).subspan(static_cast<size_t>(f.state_floats()));
    const double weight_decay = is_weight(*s.param) ? double(config_.weight_decay) : 0.0;
    // The clip, rate and decay of the group the last element belonged to: a segment holds part of
    // one group or a run of a stack's.
    int64_t group = -1;
    double clip = 1, alpha = lr, decay = 1;
    for (int64_t i = 0; i < s.size(); ++i) {
      const int64_t element = s.param->spec.global_index(s.begin + i);
      if (s.param->spec.is_padding(element)) continue;  // stays zero
      if (const int64_t now = f.group_of(element); now != group) {
        group = now;
        const double update_rms = std::sqrt(update_squares[static_cast<size_t>(group)] / numel);
        clip = std::max(1.0, update_rms / double(config_.clip_threshold));
        alpha = lr;
        if (config_.relative_step) {
          alpha *= std::max(kEps2, std::sqrt(weight_squares[static_cast<size_t>(group)] / numel));
        }
        decay = 1.0 - alpha * weight_decay;
      }
      double u = unclipped(k, s, f, i) / clip;
      if (m != nullptr) {
        m[at + i] = static_cast<float>(b1 * double(m[at + i]) + (1.0 - b1) * u);
        u = m[at + i];
      }
      s.value[i] = static_cast<float>(decay * double(s.value[i]) - alpha * u);
    }
    at += s.size();
  }
}

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
