#include "parallel/compression/compressor.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

int64_t top_k_count(int64_t elements, double ratio) {
  if (elements <= 0) return 0;
  const auto k = static_cast<int64_t>(std::ceil(ratio * static_cast<double>(elements)));
  return std::clamp<int64_t>(k, 1, elements);
}

void gather_equal(dist::Communicator& comm, const void* mine, void* all, size_t count, DType dtype) {
  const std::vector<size_t> counts(static_cast<size_t>(comm.size()), count);
  comm.all_gather(mine, all, counts, dtype)->wait();
}

std::vector<std::pair<std::string, Tensor>> JointRankState::rank_state_tensors() {
  std::vector<std::pair<std::string, Tensor>> all = dense_.rank_state_tensors();
  for (auto& [name, tensor] : experts_.rank_state_tensors()) all.emplace_back("experts." + name, tensor);
  return all;
}

std::unique_ptr<GradientCompressor> make_compressor(const CompressionOptions& options,
                                                    std::vector<BucketShape> buckets, MemoryAccountant& memory,
                                                    int rank) {
  switch (options.method) {
    case CompressionMethod::None: return nullptr;
    case CompressionMethod::TopK: return make_top_k(options, std::move(buckets), memory);
    case CompressionMethod::Qsgd: return make_qsgd(options, std::move(buckets), rank);
    case CompressionMethod::OneBit: return make_one_bit(std::move(buckets), memory);
    case CompressionMethod::PowerSgd: return make_power_sgd(options, std::move(buckets), memory);
  }
  TS_FAIL("unknown compression method {}", static_cast<int>(options.method));
}

}  // namespace tessera::parallel
