#include "optim/adam8bit.h"

#include <algorithm>

#include "ops/optimizer_update.h"

namespace tessera::optim {

bool Adam8bit::quantized(const nn::Parameter& p) {
  return p.part != nn::ParameterPart::Embedding && p.numel() >= kMinQuantizedSize;
}

int64_t Adam8bit::blocks_touched(int64_t begin, int64_t end, int64_t block_size) {
  return end <= begin ? 0 : (end - 1) / block_size - begin / block_size + 1;
}

Adam8bit::Adam8bit(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
                   std::span<const Segment> layout, const ShardReduction* reduction)
    : config_(config), reduction_(reduction), layout_(layout.begin(), layout.end()), owned_(total_elements(layout)) {
  TS_CHECK(config.beta1 >= 0.0f && config.beta1 < 1.0f && config.beta2 >= 0.0f && config.beta2 < 1.0f,
           "adam8bit: betas ({}, {}) must be in [0, 1)", config.beta1, config.beta2);
  TS_CHECK(config.block_size >= 16 && config.block_size <= (int64_t{1} << 24),
           "adam8bit: block_size = {} must be between 16 and 2^24 elements", config.block_size);
  TS_CHECK(config.quantization == "dynamic" || config.quantization == "linear",
           "adam8bit: quantization = '{}' must be \"dynamic\" or \"linear\"", config.quantization);
  const Quantization kind = config.quantization == "linear" ? Quantization::Linear : Quantization::Dynamic;
  signed_code_ = codebook(kind, true);
  unsigned_code_ = codebook(kind, false);
  const int64_t B = config.block_size;
  max_at_ = {0};
  for (const nn::Parameter& p : store.all()) {
    max_at_.push_back(max_at_.back() + (quantized(p) ? (p.numel() + B - 1) / B : 0));
  }
  q_at_ = block_at_ = f_at_ = {0};
  for (const Segment& s : layout_) {
    const bool q = quantized(*s.param);
    q_at_.push_back(q_at_.back() + (q ? s.size() : 0));
    block_at_.push_back(block_at_.back() + (q ? blocks_touched(s.begin, s.end, B) : 0));
    f_at_.push_back(f_at_.back() + (q ? 0 : s.size()));
  }
  // Zero scales dequantize any code to 0: the moments start at zero.
  m8_ = Tensor::zeros({q_at_.back()}, DType::U8, MemoryTag::Optimizer, memory);
  v8_ = Tensor::zeros({q_at_.back()}, DType::U8, MemoryTag::Optimizer, memory);
  m_absmax_ = Tensor::zeros({block_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  v_absmax_ = Tensor::zeros({block_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  m_ = Tensor::zeros({f_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({f_at_.back()}, DType::F32, MemoryTag::Optimizer, memory);
}

namespace {

// A block's new moments, waiting for the absmax of the parts other ranks hold.
struct CutBlock {
  size_t segment = 0;
  int64_t block = 0;        // in the parameter
  int64_t slot = 0;         // its scale's index in the scale tensors
  int64_t first_code = 0;   // its first element's index in the code tensors
  std::vector<float> m, v;
  float m_absmax = 0, v_absmax = 0;
};

// A 1-D tensor view of the vector's values, for the ops.
Tensor view_of(std::vector<float>& values) {
  return Tensor::from_external(values.data(), {static_cast<int64_t>(values.size())}, DType::F32);
}

// The new moments of a block, quantized with its scale.
void quantize(const Tensor& code, std::vector<float>& values, float absmax, const Tensor& codes) {
  ops::quantize_to_codes(codes, view_of(values), code, absmax);
}

}  // namespace

void Adam8bit::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(same_layout(segments, layout_),
           "adam8bit: the segments differ from those its state was built for: the owned elements changed");
  ++step_;
  const float b1 = config_.beta1, b2 = config_.beta2;
  const int64_t B = config_.block_size;
  const Tensor signed_code = view_of(signed_code_), unsigned_code = view_of(unsigned_code_);
  auto codes = [](const Tensor& all, int64_t first, size_t n) {
    return all.slice(0, first, first + static_cast<int64_t>(n));
  };

  float* m_scale = m_absmax_.data<float>();
  float* v_scale = v_absmax_.data<float>();
  std::vector<CutBlock> cut;
  std::vector<float> new_m, new_v;
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const float wd = is_weight(*s.param) ? config_.weight_decay : 0.0f;
    const ops::AdamWStep hyper{lr, b1, b2, config_.eps, wd, step_, 0};
    if (!quantized(*s.param)) {
      ops::adamw_update(s.values(), s.grads(), m_.slice(0, f_at_[k], f_at_[k] + s.size()),
                        v_.slice(0, f_at_[k], f_at_[k] + s.size()), hyper);
      continue;
    }
    const Tensor values = s.values(), grads = s.grads();
    const int64_t first_block = s.begin / B;
    const int64_t blocks = blocks_touched(s.begin, s.end, B);
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t block = first_block + bi;
      const int64_t lo = std::max(s.begin, block * B), hi = std::min(s.end, (block + 1) * B);
      const int64_t slot = block_at_[k] + bi;
      const int64_t first_code = q_at_[k] + (lo - s.begin);
      const auto n = static_cast<size_t>(hi - lo);
      new_m.resize(n);
      new_v.resize(n);
      const ops::BlockMaxima maxima = ops::adam8bit_block(
          values.slice(0, lo - s.begin, hi - s.begin), grads.slice(0, lo - s.begin, hi - s.begin),
          codes(m8_, first_code, n), codes(v8_, first_code, n), m_scale[slot], v_scale[slot], signed_code,
          unsigned_code, view_of(new_m), view_of(new_v), hyper);
      const bool whole = lo == block * B && hi == std::min((block + 1) * B, s.param->numel());
      if (whole) {
        m_scale[slot] = maxima.m;
        v_scale[slot] = maxima.v;
        quantize(signed_code, new_m, maxima.m, codes(m8_, first_code, n));
        quantize(unsigned_code, new_v, maxima.v, codes(v8_, first_code, n));
      } else {
        cut.push_back({k, block, slot, first_code, new_m, new_v, maxima.m, maxima.v});
      }
    }
  }

  const uint32_t dims = reduction_ == nullptr ? 0u : reduction_->sharded_dims();
  if (dims != 0) {
    // Every rank of a group reduces the same table: each quantized parameter's blocks, m then v.
    const int64_t blocks = max_at_.back();
    std::vector<float> maxima(static_cast<size_t>(2 * blocks), 0.0f);
    for (const CutBlock& c : cut) {
      const int64_t at = max_at_[static_cast<size_t>(segments[c.segment].param->id)] + c.block;
      maxima[static_cast<size_t>(at)] = c.m_absmax;
      maxima[static_cast<size_t>(blocks + at)] = c.v_absmax;
    }
    for (int d = 0; dims >> d != 0; ++d) {
      if ((dims >> d & 1u) != 0) reduction_->max(d, maxima);
    }
    for (CutBlock& c : cut) {
      const int64_t at = max_at_[static_cast<size_t>(segments[c.segment].param->id)] + c.block;
      c.m_absmax = maxima[static_cast<size_t>(at)];
      c.v_absmax = maxima[static_cast<size_t>(blocks + at)];
    }
  }
  for (CutBlock& c : cut) {
    m_scale[c.slot] = c.m_absmax;
    v_scale[c.slot] = c.v_absmax;
    quantize(signed_code, c.m, c.m_absmax, codes(m8_, c.first_code, c.m.size()));
    quantize(unsigned_code, c.v, c.v_absmax, codes(v8_, c.first_code, c.v.size()));
  }
}

StateDict Adam8bit::state_dict() {
  return {step_,
          {{"m8", m8_, q_at_},
           {"v8", v8_, q_at_},
           {"m_absmax", m_absmax_, block_at_},
           {"v_absmax", v_absmax_, block_at_},
           {"m", m_, f_at_},
           {"v", v_, f_at_}}};
}

void Adam8bit::load_state_dict(StateDict state) {
  load_state_tensor(state, "m8", m8_, name());
  load_state_tensor(state, "v8", v8_, name());
  load_state_tensor(state, "m_absmax", m_absmax_, name());
  load_state_tensor(state, "v_absmax", v_absmax_, name());
  load_state_tensor(state, "m", m_, name());
  load_state_tensor(state, "v", v_, name());
  step_ = state.steps;
}

}  // namespace tessera::optim
