// 1-bit (sign) compression with error feedback: each element's sign, scaled by the mean magnitude
// of its block of kSignBlock elements (one scale for a whole bucket would flatten layers whose
// gradients differ by orders of magnitude), one bit an element.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "dist/ops.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

constexpr size_t kSignBlock = 512;

class OneBit final : public GradientCompressor {
 public:
  OneBit(std::vector<BucketShape> buckets, MemoryAccountant& memory) : buckets_(std::move(buckets)) {
    for (const BucketShape& b : buckets_) {
      residuals_.push_back(Tensor::zeros({b.elements}, DType::F32, MemoryTag::Optimizer, memory));
    }
  }

  std::string_view name() const override { return "onebit"; }

  void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) override {
    Tensor& residual = residuals_.at(static_cast<size_t>(bucket));
    float* acc = residual.data<float>();
    const size_t n = grad.size();
    const size_t blocks = (n + kSignBlock - 1) / kSignBlock;
    const size_t bytes = (n + 7) / 8;
    std::vector<uint8_t> bits(bytes, 0);
    std::vector<float> scales(blocks, 0.0f);
    for (size_t blk = 0; blk < blocks; ++blk) {
      const size_t lo = blk * kSignBlock, hi = std::min(n, lo + kSignBlock);
      double magnitude = 0;
      for (size_t i = lo; i < hi; ++i) {
        acc[i] += grad[i];
        magnitude += std::fabs(acc[i]);
      }
      const float scale = static_cast<float>(magnitude / static_cast<double>(hi - lo));
      scales[blk] = scale;
      for (size_t i = lo; i < hi; ++i) {
        const bool positive = acc[i] >= 0;
        if (positive) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        acc[i] -= positive ? scale : -scale;  // the error fed back next step
      }
    }
    const auto R = static_cast<size_t>(comm.size());
    std::vector<uint8_t> all_bits(R * bytes);
    std::vector<float> all_scales(R * blocks);
    gather_equal(comm, bits.data(), all_bits.data(), bytes, DType::U8);
    gather_equal(comm, scales.data(), all_scales.data(), blocks, DType::F32);
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (size_t r = 0; r < R; ++r) {
      const uint8_t* theirs = all_bits.data() + r * bytes;
      const float* their_scales = all_scales.data() + r * blocks;
      for (size_t i = 0; i < n; ++i) {
        const float scale = their_scales[i / kSignBlock];
        grad[i] += (theirs[i / 8] >> (i % 8) & 1u) ? scale : -scale;
      }
    }
  }

  uint64_t wire_bytes(int bucket, int ranks, int rank) const override {
    const auto n = static_cast<size_t>(buckets_.at(static_cast<size_t>(bucket)).elements);
    const size_t blocks = (n + kSignBlock - 1) / kSignBlock;
    return dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), (n + 7) / 8), 1, rank) +
           dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), blocks), 4, rank);
  }

  std::vector<std::pair<std::string, Tensor>> state() override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (size_t b = 0; b < residuals_.size(); ++b) out.emplace_back("onebit.residual." + std::to_string(b), residuals_[b]);
    return out;
  }

 private:
  std::vector<BucketShape> buckets_;
  std::vector<Tensor> residuals_;  // [bucket]: [elements]
};

}  // namespace

std::unique_ptr<GradientCompressor> make_one_bit(std::vector<BucketShape> buckets, MemoryAccountant& memory) {
  return std::make_unique<OneBit>(std::move(buckets), memory);
}

}  // namespace tessera::parallel
