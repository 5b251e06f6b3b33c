#include "parallel/expert_parallel.h"

#include <vector>

#include "config/expert_parallel_shape.h"
#include "core/check.h"

namespace tessera::parallel {

ExpertParallelPlan::ExpertParallelPlan(const config::ModelConfig& model, int ep, int rank,
                                       const nn::ShardingRules* inner)
    : model_(model), ep_(ep), rank_(rank), inner_(inner) {
  if (const auto refusal = config::expert_parallel_refusal(model, ep)) TS_FAIL("{}", *refusal);
  TS_CHECK(rank >= 0 && rank < ep, "expert-parallel rank {} of {}", rank, ep);
}

std::optional<nn::ShardSpec> ExpertParallelPlan::spec_for(const std::string& name, const Shape& shape,
                                                          nn::ParameterRole role, nn::ParameterPart part) const {
  if (part != nn::ParameterPart::Expert) return inner_ != nullptr ? inner_->spec_for(name, shape, role, part) : std::nullopt;
  if (ep_ == 1) return std::nullopt;
  TS_CHECK(!shape.empty() && shape[0] == model_.moe_experts, "expert-parallel plan: '{}' of shape {} is not a stack "
           "of {} experts", name, shape_to_string(shape), model_.moe_experts);
  nn::ShardSpec spec;
  spec.global_shape = shape;
  spec.splits.push_back({0, config::MeshDim::EP, ep_, rank_, {}});
  return spec;
}

std::string ExpertParallelPlan::describe() const {
  const int per = model_.moe_experts / ep_;
  return fmt::format("expert parallel: {} experts over {} ranks, experts {}-{} on this rank", model_.moe_experts, ep_,
                     rank_ * per, (rank_ + 1) * per - 1);
}

void ExpertParallelExchange::exchange_counts(std::span<const int32_t> send, std::span<int32_t> recv) {
  const auto P = static_cast<size_t>(group_.size());
  TS_CHECK(send.size() == recv.size() && send.size() % P == 0, "expert exchange: {} counts sent and {} received "
           "over {} ranks", send.size(), recv.size(), P);
  group_.all_to_all(send.data(), recv.data(), send.size() / P, DType::I32)->wait();
}

void ExpertParallelExchange::exchange_rows(const Tensor& send, std::span<const int64_t> send_rows, const Tensor& recv,
                                           std::span<const int64_t> recv_rows) {
  const auto P = static_cast<size_t>(group_.size());
  TS_CHECK(send_rows.size() == P && recv_rows.size() == P, "expert exchange: row counts for {} and {} ranks over {}",
           send_rows.size(), recv_rows.size(), P);
  TS_CHECK(send.dtype() == recv.dtype() && send.dim() == 2 && recv.dim() == 2 && send.size(1) == recv.size(1),
           "expert exchange: rows {} {} sent into {} {}", send.shape_string(), dtype_name(send.dtype()),
           recv.shape_string(), dtype_name(recv.dtype()));
  const auto C = static_cast<size_t>(send.size(1));
  std::vector<size_t> send_counts(P), recv_counts(P);
  int64_t sent = 0, received = 0;
  for (size_t r = 0; r < P; ++r) {
    send_counts[r] = static_cast<size_t>(send_rows[r]) * C;
    recv_counts[r] = static_cast<size_t>(recv_rows[r]) * C;
    sent += send_rows[r];
    received += recv_rows[r];
  }
  TS_CHECK(sent <= send.size(0) && received <= recv.size(0), "expert exchange: {} rows sent from a buffer of {}, {} "
           "received into one of {}", sent, send.size(0), received, recv.size(0));
  group_.all_to_all(send.raw(), send_counts, recv.raw(), recv_counts, send.dtype())->wait();
}

}  // namespace tessera::parallel
