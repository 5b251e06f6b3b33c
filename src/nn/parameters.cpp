#include "nn/parameters.h"

#include "core/rng.h"

namespace tessera::nn {

Parameter& ParameterStore::declare(std::string name, Shape shape, Init init, float init_std) {
  TS_CHECK(!allocated(), "parameter '{}' declared after the parameters were allocated", name);
  for (const auto& p : params_) TS_CHECK(p.name != name, "parameter '{}' declared twice", name);
  Parameter& p = params_.emplace_back();
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.init = init;
  p.init_std = init_std;
  p.offset = static_cast<size_t>(total_);
  total_ += p.numel();
  return p;
}

void ParameterStore::allocate(MemoryAccountant& accountant) {
  TS_CHECK(!allocated(), "parameters allocated twice");
  values_ = Tensor::zeros({total_}, DType::F32, MemoryTag::Params, accountant);
  grads_ = Tensor::zeros({total_}, DType::F32, MemoryTag::Grads, accountant);
  for (auto& p : params_) {
    auto begin = static_cast<int64_t>(p.offset);
    p.value = values_.slice(0, begin, begin + p.numel()).reshape(p.shape);
    p.grad = grads_.slice(0, begin, begin + p.numel()).reshape(p.shape);
  }
}

void ParameterStore::initialize(uint64_t seed) {
  TS_CHECK(allocated(), "initialize() before allocate()");
  for (auto& p : params_) {
    float* v = p.value.data<float>();
    const int64_t n = p.numel();
    switch (p.init) {
      case Init::Zeros:
        for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
        break;
      case Init::Ones:
        for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
        break;
      case Init::Normal: {
        const uint64_t stream = stream_id(("init:" + p.name).c_str());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) v[i] = p.init_std * normal(seed, stream, static_cast<uint64_t>(i));
        break;
      }
    }
  }
}

void ParameterStore::zero_grads() { grads_.fill_zero(); }

Parameter& ParameterStore::get(const std::string& name) {
  for (auto& p : params_) {
    if (p.name == name) return p;
  }
  TS_FAIL("no parameter named '{}'", name);
}

const Parameter& ParameterStore::get(const std::string& name) const {
  return const_cast<ParameterStore*>(this)->get(name);
}

}  // namespace tessera::nn
