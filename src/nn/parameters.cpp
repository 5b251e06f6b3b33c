#include "nn/parameters.h"

#include <algorithm>

#include "core/rng.h"

namespace tessera::nn {

Shape ShardSpec::local_shape() const {
  Shape local = global_shape;
  for (const Split& s : splits) local[static_cast<size_t>(s.dim)] /= s.parts;
  return local;
}

uint32_t ShardSpec::split_mask() const {
  uint32_t mask = 0;
  for (const Split& s : splits) mask |= 1u << static_cast<int>(s.over);
  return mask;
}

int ShardSpec::parts(int dim) const {
  for (const Split& s : splits) {
    if (s.dim == dim) return s.parts;
  }
  return 1;
}

int ShardSpec::parts_over(config::MeshDim over) const {
  for (const Split& s : splits) {
    if (s.over == over) return s.parts;
  }
  return 1;
}

int64_t ShardSpec::start(int dim) const {
  for (const Split& s : splits) {
    if (s.dim != dim) continue;
    const int64_t first_block = s.blocks.empty() ? global_shape[static_cast<size_t>(dim)] : s.blocks.front();
    return static_cast<int64_t>(s.index) * (first_block / s.parts);
  }
  return 0;
}

Shape ShardSpec::unpadded_shape() const {
  Shape shape = global_shape;
  if (!shape.empty()) shape[0] -= padding_rows;
  return shape;
}

bool ShardSpec::is_padding(int64_t global) const {
  return padding_rows > 0 && global >= shape_numel(unpadded_shape());
}

namespace {
// The global coordinate along a split dimension of local coordinate `local`.
int64_t global_coordinate(const ShardSpec::Split& s, int64_t local, int64_t local_size) {
  if (s.blocks.empty()) return local + static_cast<int64_t>(s.index) * local_size;
  int64_t global_start = 0;
  for (const int64_t block : s.blocks) {
    const int64_t piece = block / s.parts;
    if (local < piece) return global_start + static_cast<int64_t>(s.index) * piece + local;
    local -= piece;
    global_start += block;
  }
  TS_FAIL("local coordinate past the blocks of split dimension {}", s.dim);
}
}  // namespace

int64_t ShardSpec::global_index(int64_t local) const {
  if (splits.empty()) return local;
  const Shape shape = local_shape();
  // Unravel in the local block, move the split dimensions to the held pieces, ravel globally.
  int64_t global = 0, stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    int64_t coordinate = local % shape[d];
    local /= shape[d];
    for (const Split& s : splits) {
      if (static_cast<size_t>(s.dim) == d) coordinate = global_coordinate(s, coordinate, shape[d]);
    }
    global += coordinate * stride;
    stride *= global_shape[d];
  }
  return global;
}

void ShardSpec::validate(const std::string& name) const {
  for (const Split& s : splits) {
    TS_CHECK(s.dim >= 0 && s.dim < static_cast<int>(global_shape.size()),
             "parameter '{}': split dimension {} is outside its shape {}", name, s.dim, shape_to_string(global_shape));
    TS_CHECK(s.parts >= 1 && s.index >= 0 && s.index < s.parts,
             "parameter '{}': piece {} of {} along dimension {} does not exist", name, s.index, s.parts, s.dim);
    TS_CHECK(global_shape[static_cast<size_t>(s.dim)] % s.parts == 0,
             "parameter '{}': dimension {} of size {} does not split into {} equal pieces", name, s.dim,
             global_shape[static_cast<size_t>(s.dim)], s.parts);
    if (!s.blocks.empty()) {
      int64_t total = 0;
      for (const int64_t block : s.blocks) {
        TS_CHECK(block > 0 && block % s.parts == 0,
                 "parameter '{}': a block of {} rows along dimension {} does not split into {} equal pieces", name,
                 block, s.dim, s.parts);
        total += block;
      }
      TS_CHECK(total == global_shape[static_cast<size_t>(s.dim)],
               "parameter '{}': blocks summing to {} along dimension {} of size {}", name, total, s.dim,
               global_shape[static_cast<size_t>(s.dim)]);
    }
    int same = 0, same_mesh = 0;
    for (const Split& t : splits) {
      same += t.dim == s.dim;
      same_mesh += t.over == s.over;
    }
    TS_CHECK(same == 1, "parameter '{}': dimension {} is split twice", name, s.dim);
    TS_CHECK(same_mesh == 1, "parameter '{}': two dimensions are split over {}", name, config::mesh_dim_name(s.over));
  }
  TS_CHECK(padding_rows >= 0 && (padding_rows == 0 || (!global_shape.empty() && padding_rows < global_shape[0])),
           "parameter '{}': {} padding rows in a shape {}", name, padding_rows, shape_to_string(global_shape));
}

Parameter& ParameterStore::declare(std::string name, Shape shape, ParameterRole role, Init init, float init_std,
                                   ParameterPart part) {
  if (sharding_ != nullptr) {
    if (std::optional<ShardSpec> spec = sharding_->spec_for(name, shape, role, part)) {
      return declare_sharded(std::move(name), std::move(*spec), role, init, init_std, part);
    }
  }
  ShardSpec whole;
  whole.global_shape = std::move(shape);
  return declare_sharded(std::move(name), std::move(whole), role, init, init_std, part);
}

Parameter& ParameterStore::declare_sharded(std::string name, ShardSpec spec, ParameterRole role, Init init,
                                           float init_std, ParameterPart part) {
  TS_CHECK(!allocated(), "parameter '{}' declared after the parameters were allocated", name);
  spec.validate(name);
  Parameter& p = params_.emplace_back();
  p.id = static_cast<int>(params_.size()) - 1;
  p.name = std::move(name);
  p.shape = spec.local_shape();
  p.spec = std::move(spec);
  p.role = role;
  p.part = part;
  p.init = init;
  p.init_std = init_std;
  p.offset = static_cast<size_t>(total_);
  total_ += p.numel();
  return p;
}

namespace {

// p's elements [begin, end), GPT-2 style from the counter RNG.
void fill_initial(const Parameter& p, uint64_t seed, int64_t begin, int64_t end, float* out) {
  switch (p.init) {
    case Init::Zeros:
      std::fill(out, out + (end - begin), 0.0f);
      return;
    case Init::Ones:
      std::fill(out, out + (end - begin), 1.0f);
      return;
    case Init::Normal: {
      const uint64_t stream = stream_id(("init:" + p.name).c_str());
      const ShardSpec& spec = p.spec;
#pragma omp parallel for schedule(static)
      for (int64_t i = begin; i < end; ++i) {
        const int64_t g = spec.global_index(i);
        out[i - begin] = spec.is_padding(g) ? 0.0f : p.init_std * normal(seed, stream, static_cast<uint64_t>(g));
      }
      return;
    }
  }
}

}  // namespace

void ParameterStore::allocate(MemoryAccountant& accountant) {
  declarations_complete(accountant);
  values_ = Tensor::zeros({total_}, DType::F32, MemoryTag::Params, accountant);
}

void ParameterStore::declarations_complete(MemoryAccountant& accountant) {
  TS_CHECK(!allocated(), "parameters allocated twice");
  // Names are checked once here: checking at each declaration made building a deep model quadratic.
  std::vector<const std::string*> names;
  names.reserve(params_.size());
  for (const auto& p : params_) names.push_back(&p.name);
  std::sort(names.begin(), names.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    TS_CHECK(*names[i] != *names[i - 1], "parameter '{}' declared twice", *names[i]);
  }
  accountant_ = &accountant;
  allocated_ = true;
}

void ParameterStore::initialize(uint64_t seed) {
  TS_CHECK(allocated(), "initialize() before allocate()");
  for (auto& p : params_) fill_initial(p, seed, 0, p.numel(), value(p).data<float>());
}

void ParameterStore::allocate_deferred(MemoryAccountant& accountant, uint64_t seed) {
  declarations_complete(accountant);
  values_owner_ = "no one yet: the initial values are made parameter by parameter by whoever takes them over";
  deferred_seed_ = seed;
}

void ParameterStore::initial_values(const Parameter& p, int64_t begin, int64_t end, float* out) const {
  TS_CHECK(deferred_seed_.has_value(), "the initial values of '{}' are made on demand only in a deferred store",
           p.name);
  TS_CHECK(begin >= 0 && begin <= end && end <= p.numel(), "elements [{}, {}) of '{}' ({} elements)", begin, end,
           p.name, p.numel());
  fill_initial(p, *deferred_seed_, begin, end, out);
}

void ParameterStore::zero_grads() { flat_grads().fill_zero(); }

Tensor& ParameterStore::flat_values() {
  TS_CHECK(values_.defined(), "{}", values_owner_.empty() ? std::string("the parameters are not allocated yet")
                                                          : "the whole parameter values are not held here: " +
                                                                values_owner_ + " holds them");
  return values_;
}

Tensor& ParameterStore::flat_grads() {
  if (!grads_.defined() && holds_grads()) grads_ = Tensor::zeros({total_}, DType::F32, MemoryTag::Grads, *accountant_);
  TS_CHECK(grads_.defined(), "{}", grads_owner_.empty() ? std::string("the parameters are not allocated yet")
                                                        : "the whole parameter gradients are not held here: " +
                                                              grads_owner_ + " holds them");
  return grads_;
}

void ParameterStore::release_values(const std::string& new_owner) {
  values_ = Tensor();
  values_owner_ = new_owner;
}

void ParameterStore::release_grads(const std::string& new_owner) {
  grads_ = Tensor();
  grads_owner_ = new_owner;
}

Tensor ParameterStore::value(const Parameter& p) {
  const auto at = static_cast<int64_t>(p.offset);
  return flat_values().slice(0, at, at + p.numel()).reshape(p.shape);
}

Tensor ParameterStore::grad_of(const Parameter& p) {
  const auto at = static_cast<int64_t>(p.offset);
  return flat_grads().slice(0, at, at + p.numel()).reshape(p.shape);
}

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
