#pragma once
// parallel.compression: which gradient compressor reduces the data-parallel buckets, and its
// options (the compressors themselves are in src/parallel/compression). The names live with the
// config so that what reads configs need not link the parallel runtime.
#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera::config {

enum class CompressionMethod : uint8_t { None, TopK, Qsgd, OneBit, PowerSgd };
std::string_view compression_name(CompressionMethod method);  // "none", "topk", "qsgd", "onebit", "powersgd"
std::optional<CompressionMethod> find_compression(std::string_view name);
// Refuses an unknown name, listing the known ones.
CompressionMethod parse_compression(std::string_view name);

struct CompressionOptions {
  CompressionMethod method = CompressionMethod::None;
  double ratio = 0.01;        // topk: the fraction of each bucket's elements sent
  int levels = 127;           // qsgd: quantization levels s (1 to 127: a signed byte)
  int rank = 4;               // powersgd: rank of each matrix's approximation
  int64_t warmup_steps = 0;   // steps reduced exactly before compression starts
  uint64_t seed = 0;          // qsgd's rounding, powersgd's first Q
};

}  // namespace tessera::config
