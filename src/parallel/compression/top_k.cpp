// Top-k sparsification with error feedback. After the dense warm-up (compression.warmup_steps) the
// fraction sent falls geometrically from 1 to compression.ratio over as many steps again, as Deep
// Gradient Compression ramps its sparsity: the error feedback then starts from small residuals
// instead of swallowing 99 % of the large early gradients at once.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "dist/ops.h"
#include "kernels/cpu/top_k_select.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

class TopK final : public GradientCompressor {
 public:
  TopK(const CompressionOptions& options, std::vector<BucketShape> buckets, MemoryAccountant& memory)
      : ratio_(options.ratio), ramp_steps_(options.warmup_steps), buckets_(std::move(buckets)) {
    TS_CHECK(ratio_ > 0 && ratio_ <= 1, "compression.ratio = {} must be in (0, 1]", ratio_);
    for (const BucketShape& b : buckets_) {
      residuals_.push_back(Tensor::zeros({b.elements}, DType::F32, MemoryTag::Optimizer, memory));
    }
  }

  std::string_view name() const override { return config::compression_name(config::CompressionMethod::TopK); }

  void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) override {
    Tensor& residual = residuals_.at(static_cast<size_t>(bucket));
    TS_CHECK(residual.numel() == static_cast<int64_t>(grad.size()), "topk: bucket {} has {} elements, not {}", bucket,
             residual.numel(), grad.size());
    const auto n = static_cast<int64_t>(grad.size());
    // The k largest magnitudes, ties to the lower index so every rerun picks the same, in index order.
    const kernels::SparseEntries sent = kernels::take_top_k_with_feedback(
        {residual.data<float>(), static_cast<size_t>(n)}, grad, top_k_count(n, ratio_now()));
    const auto k = static_cast<int64_t>(sent.index.size());
    const auto R = static_cast<size_t>(comm.size());
    std::vector<float> all_values(R * static_cast<size_t>(k));
    std::vector<int32_t> all_index(R * static_cast<size_t>(k));
    gather_equal(comm, sent.values.data(), all_values.data(), static_cast<size_t>(k), DType::F32);
    gather_equal(comm, sent.index.data(), all_index.data(), static_cast<size_t>(k), DType::I32);
    kernels::scatter_entries(grad, all_index, all_values);
  }

  uint64_t wire_bytes(int bucket, int ranks, int rank) const override {
    const auto k = static_cast<size_t>(top_k_count(buckets_.at(static_cast<size_t>(bucket)).elements, ratio_now()));
    const std::vector<size_t> counts(static_cast<size_t>(ranks), k);
    return dist::all_gather_bytes(counts, 4, rank) * 2;  // values and indices
  }

  std::vector<std::pair<std::string, Tensor>> state() override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (size_t b = 0; b < residuals_.size(); ++b) out.emplace_back("topk.residual." + std::to_string(b), residuals_[b]);
    return out;
  }

 private:
  // The fraction sent this step: ratio^(s / ramp) in the s-th compressed step of the ramp.
  double ratio_now() const {
    const int64_t compressed = step() - ramp_steps_;
    if (ramp_steps_ <= 0 || compressed >= ramp_steps_) return ratio_;
    return std::pow(ratio_, static_cast<double>(std::max<int64_t>(compressed, 1)) / static_cast<double>(ramp_steps_));
  }

  double ratio_;
  int64_t ramp_steps_;  // the dense warm-up's length: the ramp takes as many steps
  std::vector<BucketShape> buckets_;
  std::vector<Tensor> residuals_;  // [bucket]: [elements], what was not sent yet
};

}  // namespace

std::unique_ptr<GradientCompressor> make_top_k(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                               MemoryAccountant& memory) {
  return std::make_unique<TopK>(options, std::move(buckets), memory);
}

}  // namespace tessera::parallel
