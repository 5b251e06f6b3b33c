#pragma once
// Named parameters in one flat buffer. Modules declare their parameters by name and shape while the
// model is built; allocate() then places all values in one contiguous f32 buffer (tag params) and
// all gradients in another (tag grads), and every Parameter becomes a view into both. One flat
// buffer is what optimizers, gradient clipping, data-parallel buckets and ZeRO shards work on.
#include <deque>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tessera::nn {

enum class Init {
  Normal,     // N(0, std)
  Zeros,
  Ones,
};

struct Parameter {
  std::string name;  // e.g. "blocks.3.attn.qkv.weight"
  Shape shape;
  Init init = Init::Zeros;
  float init_std = 0.0f;
  size_t offset = 0;  // element offset in the flat buffers
  Tensor value;       // view into the flat parameter buffer
  Tensor grad;        // view into the flat gradient buffer
  int64_t numel() const { return shape_numel(shape); }
};

class ParameterStore {
 public:
  // References stay valid: parameters live in a deque.
  Parameter& declare(std::string name, Shape shape, Init init, float init_std = 0.0f);
  void allocate(MemoryAccountant& accountant);
  // GPT-2 style initialization from the counter RNG: element i of parameter `name` is
  // normal(seed, stream_id("init:" + name), i), so the values do not depend on the layout.
  void initialize(uint64_t seed);
  void zero_grads();

  Parameter& get(const std::string& name);
  const Parameter& get(const std::string& name) const;
  std::deque<Parameter>& all() { return params_; }
  const std::deque<Parameter>& all() const { return params_; }
  int64_t numel() const { return total_; }
  Tensor& flat_values() { return values_; }
  Tensor& flat_grads() { return grads_; }
  bool allocated() const { return values_.defined(); }

 private:
  std::deque<Parameter> params_;
  int64_t total_ = 0;
  Tensor values_;  // [numel]
  Tensor grads_;   // [numel]
};

}  // namespace tessera::nn
