#include "kernels/cpu/activation_codec.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/sparse_codec_avx512.h"

namespace tessera::kernels {

namespace {

// Blocks of whole bytes of the bitmaps: a multiple of 8 elements, so no two blocks share a byte.
constexpr size_t kBlock = detail::kElementBlock;

template <class Fn>
void for_blocks(size_t n, Fn&& fn) {
  detail::for_element_blocks(n, 1, std::forward<Fn>(fn));
}

template <class Word>
size_t count_nonzero_words(const Word* in, size_t lo, size_t hi) {
  size_t c = 0;
  for (size_t i = lo; i < hi; ++i) c += in[i] != 0;
  return c;
}

// The portable loops of one block (or of a whole tensor on one thread) of the sparse form: the
// same bytes as the AVX-512 ones (kernels/cpu/sparse_codec_avx512.h), which the CPU runs where it can.
template <class Word>
size_t sparse_pack_portable(uint8_t* bitmap, Word* values, const Word* in, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint8_t byte = 0;
    for (size_t j = i; j < std::min(n, i + 8); ++j) byte |= static_cast<uint8_t>((in[j] != 0) << (j - i));
    bitmap[i / 8] = byte;
  }
  // Branch-free compaction (every element is written, the position moves past the non-zero ones)
  // through a buffer of its own, so that the last write cannot land past the values.
  std::array<Word, kBlock> packed;
  size_t written = 0;
  for (size_t lo = 0; lo < n; lo += kBlock) {
    size_t k = 0;
    for (size_t i = lo; i < std::min(n, lo + kBlock); ++i) {
      packed[k] = in[i];
      k += in[i] != 0;
    }
    std::copy_n(packed.begin(), k, values + written);
    written += k;
  }
  return written;
}

template <class Word>
void sparse_unpack_portable(Word* out, const uint8_t* bitmap, const Word* values, size_t n) {
  // The values with one slot more, so that the branch-free expansion may read one past them.
  std::array<Word, kBlock + 1> packed;
  size_t read = 0;
  for (size_t lo = 0; lo < n; lo += kBlock) {
    const size_t hi = std::min(n, lo + kBlock);
    // Blocks start on a whole byte; a last byte that n ends inside has zeros past n.
    size_t count = 0;
    for (size_t i = lo / 8; i < (hi + 7) / 8; ++i) count += static_cast<size_t>(std::popcount(bitmap[i]));
    std::copy_n(values + read, count, packed.begin());
    packed[count] = 0;
    size_t k = 0;
    for (size_t i = lo; i < hi; ++i) {
      const Word bit = (bitmap[i / 8] >> (i % 8)) & 1u;
      out[i] = static_cast<Word>(packed[k] * bit);
      k += bit;
    }
    read += count;
  }
}

template <class Word>
size_t sparse_pack(uint8_t* bitmap, Word* values, const Word* in, size_t n, SparseKernels kernels) {
  return kernels == SparseKernels::Avx512 ? detail::sparse_pack_avx512(bitmap, values, in, n)
                                          : sparse_pack_portable(bitmap, values, in, n);
}

template <class Word>
void sparse_unpack(Word* out, const uint8_t* bitmap, const Word* values, size_t n, SparseKernels kernels) {
  if (kernels == SparseKernels::Avx512) {
    detail::sparse_unpack_avx512(out, bitmap, values, n);
  } else {
    sparse_unpack_portable(out, bitmap, values, n);
  }
}

// On one thread the blocks pack one after the other in one pass. Threads need to know where each
// block's values start first: a counting pass, which reads at several times the packing's speed.
template <class Word>
void sparse_encode_words(uint8_t* bitmap, Word* values, const Word* in, size_t n, SparseKernels kernels) {
  if (!detail::worth_parallel(n)) {
    sparse_pack(bitmap, values, in, n, kernels);
    return;
  }
  const size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<size_t> first(blocks + 1, 0);
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; ++b) first[b + 1] = count_nonzero_words(in, b * kBlock, std::min(n, (b + 1) * kBlock));
  for (size_t b = 0; b < blocks; ++b) first[b + 1] += first[b];
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    sparse_pack(bitmap + lo / 8, values + first[b], in + lo, hi - lo, kernels);
  }
}

template <class Word>
void sparse_decode_words(Word* out, const uint8_t* bitmap, const Word* values, size_t n, SparseKernels kernels) {
  if (!detail::worth_parallel(n)) {
    sparse_unpack(out, bitmap, values, n, kernels);
    return;
  }
  // A block is kBlock / 8 whole bytes of the bitmap, read as 64-bit words but for the last block's.
  static_assert(kBlock % 64 == 0);
  const size_t blocks = (n + kBlock - 1) / kBlock, bytes = (n + 7) / 8;
  std::vector<size_t> first(blocks + 1, 0);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kBlock / 8, hi = std::min(bytes, lo + kBlock / 8);
    size_t c = 0, i = lo;
    for (; i + 8 <= hi; i += 8) {
      uint64_t word = 0;
      std::memcpy(&word, bitmap + i, 8);
      c += static_cast<size_t>(std::popcount(word));
    }
    for (; i < hi; ++i) c += static_cast<size_t>(std::popcount(bitmap[i]));
    first[b + 1] = first[b] + c;
  }
#pragma omp parallel for schedule(static)
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    sparse_unpack(out + lo, bitmap + lo / 8, values + first[b], hi - lo, kernels);
  }
}

std::array<float, 256> e4m3_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xF, m = c & 7;
    float v = 0;
    if (e == 15 && m == 7) {
      v = std::nanf("");
    } else if (e == 0) {
      v = std::ldexp(static_cast<float>(m), -9);
    } else {
      v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    }
    t[static_cast<size_t>(c)] = (c & 0x80) ? -v : v;
  }
  return t;
}

const std::array<float, 256> kE4m3 = e4m3_table();
constexpr float kE4m3Max = 448.0f;

// Branch-free, so that the loops over a block vectorize: the subnormal and the normal code are
// both computed and one is selected, then saturation and NaN are selected over it.
// Lanes are 32-bit integers throughout (signed where a float converts), which the vectorizer
// handles on AVX2 as on AVX-512.
inline uint8_t e4m3_of(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const int32_t sign = static_cast<int32_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  // Normal: the 23-bit mantissa rounded to 3 bits, to nearest even (a carry moves into the
  // exponent), and the exponent's bias moved from 127 to 7. Negative for a below 2^-6, not selected then.
  const int32_t normal = static_cast<int32_t>((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120 << 3);
  // Below 2^-6: m · 2^-9; adding and subtracting 2^23 rounds m to nearest even in float arithmetic.
  const float m = (std::bit_cast<float>(a) * 512.0f + 8388608.0f) - 8388608.0f;
  int32_t code = a < 0x3c800000u ? static_cast<int32_t>(m) : normal;
  code = code > 0x7e ? 0x7e : code;      // 448 is the largest: E4M3 has no infinity
  code = a > 0x7f800000u ? 0x7f : code;  // NaN
  return static_cast<uint8_t>(sign | code);
}

}  // namespace

uint8_t float_to_e4m3(float f) { return e4m3_of(f); }

float e4m3_to_float(uint8_t code) { return kE4m3[code]; }

template <class T>
void sign_encode(uint8_t* bits, const T* in, size_t n) {
  for_blocks(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i += 8) {
      uint8_t byte = 0;
      for (size_t j = i; j < std::min(hi, i + 8); ++j) {
        if (load(in[j]) > 0) byte |= static_cast<uint8_t>(1u << (j - i));
      }
      bits[i / 8] = byte;
    }
  });
}

template <class T>
void sign_decode(T* out, const uint8_t* bits, size_t n) {
  const T one = store<T>(compute_t<T>(1)), zero = store<T>(compute_t<T>(0));
  for_blocks(n, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) out[i] = (bits[i / 8] >> (i % 8)) & 1u ? one : zero;
  });
}

size_t count_nonzero(const void* in, size_t n, size_t element_bytes) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  size_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (detail::worth_parallel(n))
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    total += element_bytes == 4 ? count_nonzero_words(static_cast<const uint32_t*>(in), lo, hi)
                                : count_nonzero_words(static_cast<const uint16_t*>(in), lo, hi);
  }
  return total;
}

size_t count_nonzero_until(const void* in, size_t n, size_t element_bytes, size_t limit) {
  // Blocks in order on this thread: a dense tensor passes the limit within its first blocks.
  size_t total = 0;
  for (size_t lo = 0; lo < n && total <= limit; lo += kBlock) {
    const size_t hi = std::min(n, lo + kBlock);
    total += element_bytes == 4 ? count_nonzero_words(static_cast<const uint32_t*>(in), lo, hi)
                                : count_nonzero_words(static_cast<const uint16_t*>(in), lo, hi);
  }
  return total;
}

SparseKernels detect_sparse_kernels() {
  return detail::sparse_avx512_supported() ? SparseKernels::Avx512 : SparseKernels::Portable;
}

void sparse_encode(uint8_t* bitmap, void* values, const void* in, size_t n, size_t element_bytes,
                   SparseKernels kernels) {
  if (element_bytes == 4) {
    sparse_encode_words(bitmap, static_cast<uint32_t*>(values), static_cast<const uint32_t*>(in), n, kernels);
  } else {
    sparse_encode_words(bitmap, static_cast<uint16_t*>(values), static_cast<const uint16_t*>(in), n, kernels);
  }
}

void sparse_decode(void* out, const uint8_t* bitmap, const void* values, size_t n, size_t element_bytes,
                   SparseKernels kernels) {
  if (element_bytes == 4) {
    sparse_decode_words(static_cast<uint32_t*>(out), bitmap, static_cast<const uint32_t*>(values), n, kernels);
  } else {
    sparse_decode_words(static_cast<uint16_t*>(out), bitmap, static_cast<const uint16_t*>(values), n, kernels);
  }
}

template <class T>
void fp8_encode(uint8_t* codes, float* scales, const T* in, size_t n) {
  const size_t blocks = fp8_blocks(n);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kFp8Block, hi = std::min(n, lo + kFp8Block);
    float amax = 0;
#pragma omp simd reduction(max : amax)
    for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(static_cast<float>(load(in[i]))));
    // A block of zeros (or one whose largest value is not finite: its codes saturate) keeps scale 1.
    const float scale = amax > 0 && std::isfinite(amax) ? amax / kE4m3Max : 1.0f;
    scales[b] = scale;
    const float inverse = 1.0f / scale;
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) codes[i] = e4m3_of(static_cast<float>(load(in[i])) * inverse);
  }
}

template <class T>
void fp8_decode(T* out, const uint8_t* codes, const float* scales, size_t n) {
  const size_t blocks = fp8_blocks(n);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(n))
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * kFp8Block, hi = std::min(n, lo + kFp8Block);
    const float scale = scales[b];
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) out[i] = store<T>(static_cast<compute_t<T>>(kE4m3[codes[i]] * scale));
  }
}

template void sign_encode<float>(uint8_t*, const float*, size_t);
template void sign_encode<bf16>(uint8_t*, const bf16*, size_t);
template void sign_encode<f16>(uint8_t*, const f16*, size_t);
template void sign_decode<float>(float*, const uint8_t*, size_t);
template void sign_decode<bf16>(bf16*, const uint8_t*, size_t);
template void sign_decode<f16>(f16*, const uint8_t*, size_t);
template void fp8_encode<float>(uint8_t*, float*, const float*, size_t);
template void fp8_encode<bf16>(uint8_t*, float*, const bf16*, size_t);
template void fp8_encode<f16>(uint8_t*, float*, const f16*, size_t);
template void fp8_decode<float>(float*, const uint8_t*, const float*, size_t);
template void fp8_decode<bf16>(bf16*, const uint8_t*, const float*, size_t);
template void fp8_decode<f16>(f16*, const uint8_t*, const float*, size_t);

}  // namespace tessera::kernels
