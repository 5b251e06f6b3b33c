#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cstring>

#include "config/tensor_parallel_shape.h"
#include "core/check.h"
#include "nn/step_context.h"

namespace tessera::parallel {

std::string_view tensor_split_name(TensorSplit split) {
  switch (split) {
    case TensorSplit::ColumnByHeads: return "column (by heads)";
    case TensorSplit::Column: return "column";
    case TensorSplit::Row: return "row";
    case TensorSplit::VocabRows: return "vocabulary rows";
  }
  return "?";
}

std::vector<TensorParallelRule> TensorParallelPlan::megatron_rules() {
  return {
      {"embed.tokens", TensorSplit::VocabRows},
      {"attn.qkv", TensorSplit::ColumnByHeads},
      {"attn.proj", TensorSplit::Row},
      {"mlp.fc", TensorSplit::Column},    // ungated MLP
      {"mlp.proj", TensorSplit::Row},     // ungated MLP
      {"mlp.gate", TensorSplit::Column},  // SwiGLU
      {"mlp.up", TensorSplit::Column},    // SwiGLU
      {"mlp.down", TensorSplit::Row},     // SwiGLU
      {"head", TensorSplit::VocabRows},   // untied
  };
}

TensorParallelPlan::TensorParallelPlan(const config::ModelConfig& model, int tp, int rank,
                                       std::vector<TensorParallelRule> rules)
    : model_(model), tp_(tp), rank_(rank), rules_(std::move(rules)) {
  if (const auto refusal = config::tensor_parallel_refusal(model, tp)) TS_FAIL("{}", *refusal);
  TS_CHECK(rank >= 0 && rank < tp, "tensor-parallel rank {} of {}", rank, tp);
  padded_vocab_ = (int64_t{model.vocab_size} + tp - 1) / tp * tp;
}

const TensorParallelRule* TensorParallelPlan::rule_for(const std::string& layer) const {
  for (const TensorParallelRule& r : rules_) {
    if (layer == r.layer || (layer.size() > r.layer.size() && layer.ends_with("." + r.layer))) return &r;
  }
  return nullptr;
}

std::optional<nn::ShardSpec> TensorParallelPlan::spec_for(const std::string& name, const Shape& shape,
                                                          nn::ParameterRole role, nn::ParameterPart) const {
  if (tp_ == 1) return std::nullopt;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string layer = name.substr(0, dot);
  const TensorParallelRule* rule = rule_for(layer);
  if (rule == nullptr) return std::nullopt;
  const bool weight = role == nn::ParameterRole::Weight;
  TS_CHECK(weight || role == nn::ParameterRole::Bias,
           "tensor-parallel plan: '{}' is neither a weight nor a bias of layer '{}'", name, layer);
  nn::ShardSpec spec;
  spec.global_shape = shape;
  auto split = [&](int dim, std::vector<int64_t> blocks = {}) {
    spec.splits.push_back({dim, config::MeshDim::TP, tp_, rank_, std::move(blocks)});
  };
  switch (rule->split) {
    case TensorSplit::ColumnByHeads: {
      // q, k and v each split by heads, so a rank's query heads keep their key/value heads.
      const int64_t q = model_.n_embd, kv = model_.kv_dim();
      split(0, {q, kv, kv});
      break;
    }
    case TensorSplit::Column: split(0); break;
    case TensorSplit::Row:
      if (!weight) return std::nullopt;  // every rank adds the whole bias after the reduction
      split(1);
      break;
    case TensorSplit::VocabRows:
      TS_CHECK(weight && shape.size() == 2 && shape[0] == model_.vocab_size,
               "tensor-parallel plan: '{}' of shape {} is not a [V = {}, C] table", name, shape_to_string(shape),
               model_.vocab_size);
      spec.global_shape[0] = padded_vocab_;
      spec.padding_rows = padded_vocab_ - model_.vocab_size;
      split(0);
      break;
  }
  return spec;
}

namespace {

// Whether `model` has the layer a rule names: the Megatron rules cover the ungated MLP (fc, proj)
// and the gated one (gate, up, down), and an untied head; a plan's description lists only this
// model's.
bool has_layer(const config::ModelConfig& model, std::string_view layer) {
  if (layer == "head") return !model.tied_embeddings;
  const bool ungated_mlp = layer == "mlp.fc" || layer == "mlp.proj";
  const bool gated_mlp = layer == "mlp.gate" || layer == "mlp.up" || layer == "mlp.down";
  if (ungated_mlp || gated_mlp) return gated_mlp == model.gated_mlp();
  return true;
}

}  // namespace

std::string TensorParallelPlan::describe() const {
  std::string text = fmt::format("tensor parallel: tp {}", tp_);
  const char* separator = "; ";
  for (const TensorParallelRule& r : rules_) {
    if (!has_layer(model_, r.layer)) continue;
    text += fmt::format("{}{} {}", separator, r.layer, tensor_split_name(r.split));
    separator = ", ";
  }
  if (vocab_padding() > 0) {
    text += fmt::format("; vocabulary padded from {} to {} (the padding never wins)", model_.vocab_size, padded_vocab_);
  }
  return text;
}

std::vector<float> gather_parameter(dist::Communicator* group, const nn::Parameter& p, std::span<const float> block,
                                    config::MeshDim over) {
  TS_CHECK(static_cast<int64_t>(block.size()) == p.numel(), "gather_parameter '{}': a block of {} values for {}",
           p.name, block.size(), p.numel());
  if (p.spec.replicated_over(over)) return {block.begin(), block.end()};
  TS_CHECK(group != nullptr && group->size() == p.spec.parts_over(over),
           "gather_parameter '{}': split into {} parts over {} but gathered over {} ranks", p.name,
           p.spec.parts_over(over), config::mesh_dim_name(over), group ? group->size() : 1);
  const size_t n = block.size();
  std::vector<float> all(n * static_cast<size_t>(group->size()));
  const std::vector<size_t> counts(static_cast<size_t>(group->size()), n);
  group->all_gather(block.data(), all.data(), counts, DType::F32)->wait();
  std::vector<float> whole(static_cast<size_t>(shape_numel(p.spec.unpadded_shape())));
  for (int r = 0; r < group->size(); ++r) {
    nn::ShardSpec theirs = p.spec;
    for (nn::ShardSpec::Split& s : theirs.splits) {
      if (s.over == over) s.index = r;
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t g = theirs.global_index(static_cast<int64_t>(i));
      if (!theirs.is_padding(g)) whole[static_cast<size_t>(g)] = all[static_cast<size_t>(r) * n + i];
    }
  }
  return whole;
}

void gather_parameters(dist::Communicator* group, const nn::ParameterStore& blocks, nn::ParameterAccess& values,
                       nn::ParameterStore& whole, dist::Communicator* experts) {
  for (const nn::Parameter& p : blocks.all()) {
    const Tensor block = values.weight(p);
    const std::span<const float> mine(block.data<float>(), static_cast<size_t>(p.numel()));
    const std::vector<float> value = p.spec.replicated_over(config::MeshDim::EP)
                                         ? gather_parameter(group, p, mine)
                                         : gather_parameter(experts, p, mine, config::MeshDim::EP);
    const nn::Parameter& target = whole.get(p.name);
    TS_CHECK(target.numel() == static_cast<int64_t>(value.size()),
             "gather_parameters: '{}' has {} elements in the one-process model, {} gathered", p.name, target.numel(),
             value.size());
    std::copy(value.begin(), value.end(), whole.value(target).data<float>());
  }
}

Tensor TensorParallelRegion::enter(nn::StepContext&, const Tensor& x) { return x; }

Tensor TensorParallelRegion::enter_backward(nn::StepContext&, const Tensor& dx) {
  group_.all_reduce(dx, dist::ReduceOp::Sum)->wait();
  return dx;
}

Tensor TensorParallelRegion::leave(nn::StepContext&, const Tensor& partial) {
  group_.all_reduce(partial, dist::ReduceOp::Sum)->wait();
  return partial;
}

Tensor TensorParallelRegion::leave_backward(nn::StepContext&, const Tensor& dy) { return dy; }

void TensorParallelRegion::max_over_group(std::span<float> values) {
  group_.all_reduce(values, dist::ReduceOp::Max)->wait();
}

void TensorParallelRegion::sum_over_group(std::span<float> values) {
  group_.all_reduce(values, dist::ReduceOp::Sum)->wait();
}

namespace {

Tensor allocate(nn::StepContext& step, const Shape& shape, DType dtype, MemoryTag tag) {
  return tag == MemoryTag::Activations ? step.activation(shape, dtype) : step.workspace(shape, dtype);
}

}  // namespace

void pack_sequence_parts(void* packed, const void* whole, int64_t parts, int64_t B, int64_t Ts, int64_t C,
                         size_t element_bytes) {
  const auto block = static_cast<size_t>(Ts * C) * element_bytes;
  auto* to = static_cast<char*>(packed);
  const auto* from = static_cast<const char*>(whole);
  for (int64_t r = 0; r < parts; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(to + static_cast<size_t>(r * B + b) * block, from + static_cast<size_t>(b * parts + r) * block, block);
    }
  }
}

void unpack_sequence_parts(void* whole, const void* packed, int64_t parts, int64_t B, int64_t Ts, int64_t C,
                           size_t element_bytes) {
  const auto block = static_cast<size_t>(Ts * C) * element_bytes;
  auto* to = static_cast<char*>(whole);
  const auto* from = static_cast<const char*>(packed);
  for (int64_t r = 0; r < parts; ++r) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(to + static_cast<size_t>(b * parts + r) * block, from + static_cast<size_t>(r * B + b) * block, block);
    }
  }
}

Tensor SequenceParallelRegion::gather(nn::StepContext& step, const Tensor& part, MemoryTag tag) {
  part.expect_shape({-1, -1, -1}, "sequence-parallel part");
  const int64_t t = group_.size(), B = part.size(0), Ts = part.size(1), C = part.size(2);
  Tensor whole = allocate(step, {B, t * Ts, C}, part.dtype(), tag);
  const auto count = static_cast<size_t>(part.numel());
  const DType dtype = part.dtype();
  if (B == 1) {  // one sequence: rank order is sequence order
    group_.all_gather(part.raw(), whole.raw(), count, dtype)->wait();
    return whole;
  }
  Tensor packed = step.workspace({t, B, Ts, C}, dtype);
  group_.all_gather(part.raw(), packed.raw(), count, dtype)->wait();
  unpack_sequence_parts(whole.raw(), packed.raw(), t, B, Ts, C, dtype_size(dtype));
  return whole;
}

Tensor SequenceParallelRegion::scatter(nn::StepContext& step, const Tensor& whole, MemoryTag tag) {
  whole.expect_shape({-1, -1, -1}, "sequence-parallel partial sums");
  const int64_t t = group_.size(), B = whole.size(0), T = whole.size(1), C = whole.size(2);
  TS_CHECK(T % t == 0, "sequence parallelism over {} ranks: a sequence of {} positions does not split into {} equal "
           "parts; use a sequence length that is a multiple of {}", t, T, t, t);
  const int64_t Ts = T / t;
  const DType dtype = whole.dtype();
  Tensor part = allocate(step, {B, Ts, C}, dtype, tag);
  const auto count = static_cast<size_t>(part.numel());
  if (B == 1) {
    group_.reduce_scatter(whole.raw(), part.raw(), count, dtype, dist::ReduceOp::Sum)->wait();
    return part;
  }
  Tensor packed = step.workspace({t, B, Ts, C}, dtype);
  pack_sequence_parts(packed.raw(), whole.raw(), t, B, Ts, C, dtype_size(dtype));
  group_.reduce_scatter(packed.raw(), part.raw(), count, dtype, dist::ReduceOp::Sum)->wait();
  return part;
}

Tensor SequenceParallelRegion::enter(nn::StepContext& step, const Tensor& x) {
  return gather(step, x, MemoryTag::Activations);  // the projections keep it for their weight gradients
}

Tensor SequenceParallelRegion::enter_backward(nn::StepContext& step, const Tensor& dx) {
  return scatter(step, dx, MemoryTag::Workspace);
}

Tensor SequenceParallelRegion::leave(nn::StepContext& step, const Tensor& partial) {
  return scatter(step, partial, MemoryTag::Activations);  // the residual stream
}

Tensor SequenceParallelRegion::leave_backward(nn::StepContext& step, const Tensor& dy) {
  return gather(step, dy, MemoryTag::Workspace);
}

void SequenceParallelRegion::max_over_group(std::span<float> values) {
  group_.all_reduce(values, dist::ReduceOp::Max)->wait();
}

void SequenceParallelRegion::sum_over_group(std::span<float> values) {
  group_.all_reduce(values, dist::ReduceOp::Sum)->wait();
}

void sum_sequence_parallel_gradients(dist::Communicator& group, std::span<const optim::Segment> segments) {
  std::vector<const optim::Segment*> whole;
  size_t count = 0;
  for (const optim::Segment& s : segments) {
    // A segment with no gradient in memory has it in ZeRO-3's shard in the nvme tier, which summed
    // it over the group as it landed (offloaded_gradients.h).
    if (s.grad == nullptr) continue;
    if (s.param->spec.replicated_over(config::MeshDim::TP) && s.size() > 0) {
      whole.push_back(&s);
      count += static_cast<size_t>(s.size());
    }
  }
  if (whole.empty()) return;
  std::vector<float> packed;
  packed.reserve(count);
  for (const optim::Segment* s : whole) packed.insert(packed.end(), s->grad, s->grad + s->size());
  group.all_reduce(packed.data(), packed.size(), DType::F32, dist::ReduceOp::Sum)->wait();
  size_t at = 0;
  for (const optim::Segment* s : whole) {
    std::copy_n(packed.data() + at, s->size(), s->grad);
    at += static_cast<size_t>(s->size());
  }
}

TensorParallel::TensorParallel(dist::Communicator& group, bool sequence_parallel, exec::ParameterOwnership& ownership)
    : group_(group), sequence_parallel_(sequence_parallel), ownership_(ownership) {
  if (sequence_parallel) {
    region_ = std::make_unique<SequenceParallelRegion>(group);
  } else {
    region_ = std::make_unique<TensorParallelRegion>(group);
  }
}

void TensorParallel::before(const exec::Event& event) {
  if (event.step != nullptr) event.step->region = region_.get();
}

void TensorParallel::finish(const exec::Program& program) {
  if (program.training && sequence_parallel_) sum_sequence_parallel_gradients(group_, ownership_.master_segments());
}

}  // namespace tessera::parallel
