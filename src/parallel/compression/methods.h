#pragma once
// The compressors behind make_compressor (compressor.h), one file each.
#include <cstdint>
#include <memory>
#include <span>
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

// One-bit compression (one_bit.cpp): the sign of each element, one bit, and per block of
// kSignBlock elements one scale, the block's mean magnitude (one scale for a whole bucket would
// flatten layers whose gradients differ by orders of magnitude).
inline constexpr size_t kSignBlock = 512;
inline size_t sign_blocks(size_t elements) { return (elements + kSignBlock - 1) / kSignBlock; }
inline size_t sign_bits_bytes(size_t elements) { return (elements + 7) / 8; }
// Compresses `acc` into `bits` (sign_bits_bytes) and `scales` (sign_blocks) and leaves in `acc`
// what the message does not carry: the error to feed back.
void sign_compress(std::span<float> acc, uint8_t* bits, float* scales);
// out += weight × the decompressed message.
void add_sign_decompressed(std::span<float> out, const uint8_t* bits, const float* scales, float weight);

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
