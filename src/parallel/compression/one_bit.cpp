// The 1-bit gradient compressor: sign compression with error feedback (kernels/cpu/sign_compression.h),
// all-gathered.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "dist/ops.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

class OneBit final : public GradientCompressor {
 public:
  OneBit(std::vector<BucketShape> buckets, MemoryAccountant& memory) : buckets_(std::move(buckets)) {
    for (const BucketShape& b : buckets_) {
      residuals_.push_back(Tensor::zeros({b.elements}, DType::F32, MemoryTag::Optimizer, memory));
    }
  }

  std::string_view name() const override { return config::compression_name(config::CompressionMethod::OneBit); }

  void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) override {
    Tensor& residual = residuals_.at(static_cast<size_t>(bucket));
    sign_compressed_sum(grad, std::span(residual.data<float>(), static_cast<size_t>(residual.numel())), comm);
  }

  uint64_t wire_bytes(int bucket, int ranks, int rank) const override {
    return sign_compressed_wire_bytes(static_cast<size_t>(buckets_.at(static_cast<size_t>(bucket)).elements), ranks,
                                      rank);
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

void sign_compressed_sum(std::span<float> values, std::span<float> residual, dist::Communicator& comm) {
  TS_CHECK(values.size() == residual.size(), "one-bit compression of {} values with a residual of {}", values.size(),
           residual.size());
  const size_t n = values.size(), blocks = sign_blocks(n), bytes = sign_bits_bytes(n);
  for (size_t i = 0; i < n; ++i) residual[i] += values[i];
  std::vector<uint8_t> bits(bytes);
  std::vector<float> scales(blocks);
  sign_compress(residual, bits.data(), scales.data());
  const auto R = static_cast<size_t>(comm.size());
  std::vector<uint8_t> all_bits(R * bytes);
  std::vector<float> all_scales(R * blocks);
  gather_equal(comm, bits.data(), all_bits.data(), bytes, DType::U8);
  gather_equal(comm, scales.data(), all_scales.data(), blocks, DType::F32);
  std::fill(values.begin(), values.end(), 0.0f);
  for (size_t r = 0; r < R; ++r) add_sign_decompressed(values, all_bits.data() + r * bytes, all_scales.data() + r * blocks, 1.0f);
}

uint64_t sign_compressed_wire_bytes(size_t elements, int ranks, int rank) {
  return dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), sign_bits_bytes(elements)), 1, rank) +
         dist::all_gather_bytes(std::vector<size_t>(static_cast<size_t>(ranks), sign_blocks(elements)), 4, rank);
}

std::unique_ptr<GradientCompressor> make_one_bit(std::vector<BucketShape> buckets, MemoryAccountant& memory) {
  return std::make_unique<OneBit>(std::move(buckets), memory);
}

}  // namespace tessera::parallel
