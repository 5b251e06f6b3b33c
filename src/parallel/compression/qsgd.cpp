// QSGD: stochastic rounding to `levels` levels of each block's norm, one signed byte an element.
// The norm is taken per block of kQsgdBlock elements, as Alistarh et al. bucket it: the rounding's
// variance grows with √(elements per norm) / levels, which over a whole bucket of millions of
// elements would drown the gradient.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"
#include "dist/ops.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

constexpr size_t kQsgdBlock = 512;

class Qsgd final : public GradientCompressor {
 public:
  Qsgd(const CompressionOptions& options, std::vector<BucketShape> buckets, int rank)
      : levels_(options.levels), seed_(options.seed), rank_(rank), buckets_(std::move(buckets)) {
    TS_CHECK(levels_ >= 1 && levels_ <= 127, "compression.levels = {} must be 1 to 127 (one signed byte)", levels_);
  }

  std::string_view name() const override { return config::compression_name(config::CompressionMethod::Qsgd); }

  void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) override {
    const size_t n = grad.size();
    const size_t blocks = (n + kQsgdBlock - 1) / kQsgdBlock;
    // One stream per (step, rank, bucket): the rounding differs between them, not between reruns.
    const uint64_t stream = (static_cast<uint64_t>(step()) << 32) ^ (static_cast<uint64_t>(rank_) << 20) ^
                            static_cast<uint64_t>(bucket) ^ stream_id("compression:qsgd");
    std::vector<int8_t> q(n, 0);
    std::vector<float> norms(blocks, 0.0f);
    const float s = static_cast<float>(levels_);
    for (size_t blk = 0; blk < blocks; ++blk) {
      const size_t lo = blk * kQsgdBlock, hi = std::min(n, lo + kQsgdBlock);
      double squares = 0;
      for (size_t i = lo; i < hi; ++i) squares += double(grad[i]) * grad[i];
      const float norm = static_cast<float>(std::sqrt(squares));
      norms[blk] = norm;
      if (norm == 0) continue;
      for (size_t i = lo; i < hi; ++i) {
        const float scaled = std::fabs(grad[i]) / norm * s;  // in [0, s]
        const float level = std::min(std::floor(scaled + uniform(seed_, stream, i)), s);
        q[i] = static_cast<int8_t>(grad[i] < 0 ? -level : level);
      }
    }
    const auto R = static_cast<size_t>(comm.size());
    std::vector<int8_t> all_q(R * n);
    std::vector<float> all_norms(R * blocks);
    gather_equal(comm, q.data(), all_q.data(), n, DType::I8);
    gather_equal(comm, norms.data(), all_norms.data(), blocks, DType::F32);
    std::fill(grad.begin(), grad.end(), 0.0f);
    for (size_t r = 0; r < R; ++r) {
      const int8_t* theirs = all_q.data() + r * n;
      const float* their_norms = all_norms.data() + r * blocks;
      for (size_t i = 0; i < n; ++i) grad[i] += their_norms[i / kQsgdBlock] / s * static_cast<float>(theirs[i]);
    }
  }

  uint64_t wire_bytes(int bucket, int ranks, int rank) const override {
    const auto n = static_cast<size_t>(buckets_.at(static_cast<size_t>(bucket)).elements);
    const size_t blocks = (n + kQsgdBlock - 1) / kQsgdBlock;
    return dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), n), 1, rank) +
           dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), blocks), 4, rank);
  }

 private:
  int levels_;
  uint64_t seed_;
  int rank_;
  std::vector<BucketShape> buckets_;
};

}  // namespace

std::unique_ptr<GradientCompressor> make_qsgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                              int rank) {
  return std::make_unique<Qsgd>(options, std::move(buckets), rank);
}

}  // namespace tessera::parallel
