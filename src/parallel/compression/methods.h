#pragma once
// The compressors behind make_compressor (compressor.h), one file each.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/sign_compression.h"
#include "parallel/compression/compressor.h"

namespace tessera::parallel {

std::unique_ptr<GradientCompressor> make_top_k(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                               MemoryAccountant& memory);
std::unique_ptr<GradientCompressor> make_qsgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                              int rank);
std::unique_ptr<GradientCompressor> make_one_bit(std::vector<BucketShape> buckets, MemoryAccountant& memory);
std::unique_ptr<GradientCompressor> make_power_sgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                                   MemoryAccountant& memory);

// One-bit compression (kernels/cpu/sign_compression.h), which 1-bit Adam shares.
using kernels::add_sign_decompressed;
using kernels::kSignBlock;
using kernels::sign_bits_bytes;
using kernels::sign_blocks;
using kernels::sign_compress;

// One-bit compression with error feedback, all-gathered: each member sends the signs of values +
// residual and one scale, their mean magnitude, per block of 512 elements, keeps in `residual`
// what that message does not carry, and `values` becomes the sum over `comm` of every member's
// decompressed message. Collective; every member passes the same number of values.
void sign_compressed_sum(std::span<float> values, std::span<float> residual, dist::Communicator& comm);
// The bytes this rank sends for it: the bits and the scales, all-gathered.
uint64_t sign_compressed_wire_bytes(size_t elements, int ranks, int rank);

// Every rank's `count` elements of `mine` side by side (rank order) in `all`; all-gather.
void gather_equal(dist::Communicator& comm, const void* mine, void* all, size_t count, DType dtype);

}  // namespace tessera::parallel
