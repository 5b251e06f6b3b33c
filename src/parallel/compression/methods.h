#pragma once
// The compressors behind make_compressor (compressor.h), one file each.
#include <memory>
#include <vector>

#include "parallel/compression/compressor.h"

namespace tessera::parallel {

std::unique_ptr<GradientCompressor> make_top_k(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                               MemoryAccountant& memory);
std::unique_ptr<GradientCompressor> make_qsgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                              int rank);
std::unique_ptr<GradientCompressor> make_one_bit(std::vector<BucketShape> buckets, MemoryAccountant& memory);
std::unique_ptr<GradientCompressor> make_power_sgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                                   MemoryAccountant& memory);

// Every rank's `count` elements of `mine` side by side (rank order) in `all`; all-gather.
void gather_equal(dist::Communicator& comm, const void* mine, void* all, size_t count, DType dtype);

}  // namespace tessera::parallel
