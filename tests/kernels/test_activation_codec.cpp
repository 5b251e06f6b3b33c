// The encodings of saved activations (kernels/cpu/activation_codec.h): the lossless ones give the
// same bits back (or, for the sign, the same mask) for every dtype and for sizes that end inside a
// byte, a vector and a block; FP8 E4M3 rounds to nearest even, saturates at 448, keeps NaN, and
// stays within its relative error bound with a scale per block. The sparse form's kernels, portable
// and AVX-512, write the bytes of a plain scalar reference on arbitrary bit patterns.
#include <gtest/gtest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/activation_codec.h"

namespace tk = tessera::kernels;
using tessera::bf16;
using tessera::f16;

namespace {

// Values with every case a stash meets: zeros of both signs, denormals, large, NaN, infinities.
std::vector<float> mixed_values(size_t n, double zero_fraction, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::uniform_real_distribution<double> p(0.0, 1.0);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = p(rng) < zero_fraction ? 0.0f : u(rng);
  if (n > 10) {
    v[1] = -0.0f;
    v[3] = std::numeric_limits<float>::denorm_min();
    v[5] = std::numeric_limits<float>::quiet_NaN();
    v[7] = -std::numeric_limits<float>::infinity();
    v[9] = 1e30f;
  }
  return v;
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) {
      out[i] = v[i];
    } else {
      out[i] = tk::store<T>(v[i]);
    }
  }
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <class T>
void check_sparse(size_t n, double zero_fraction) {
  const std::vector<T> in = as<T>(mixed_values(n, zero_fraction, static_cast<uint32_t>(n)));
  const size_t nonzero = tk::count_nonzero(in.data(), n, sizeof(T));
  size_t expected = 0;
  for (const T& x : in) {
    uint32_t bits = 0;
    std::memcpy(&bits, &x, sizeof(T));
    expected += bits != 0;
  }
  ASSERT_EQ(nonzero, expected);
  // Stopping early: exact up to the limit, above it past it.
  EXPECT_EQ(tk::count_nonzero_until(in.data(), n, sizeof(T), expected), expected);
  if (expected > 0) EXPECT_GT(tk::count_nonzero_until(in.data(), n, sizeof(T), expected - 1), expected - 1);
  std::vector<uint8_t> bitmap(tk::sign_bytes(n));
  std::vector<T> values(nonzero + 1), out(n);
  tk::sparse_encode(bitmap.data(), values.data(), in.data(), n, sizeof(T));
  tk::sparse_decode(out.data(), bitmap.data(), values.data(), n, sizeof(T));
  EXPECT_TRUE(same_bits(in, out)) << "n " << n << ", zeros " << zero_fraction;
}

template <class T>
void check_sign(size_t n) {
  const std::vector<T> in = as<T>(mixed_values(n, 0.3, static_cast<uint32_t>(n) + 7));
  std::vector<uint8_t> bits(tk::sign_bytes(n));
  std::vector<T> out(n);
  tk::sign_encode(bits.data(), in.data(), n);
  tk::sign_decode(out.data(), bits.data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(tk::load(out[i]) > 0, tk::load(in[i]) > 0) << "element " << i << " of " << n;
  }
}

// Raw words of every kind a bit-level codec must pass through unchanged: zeros of both signs,
// denormals, NaNs quiet and signalling, infinities and arbitrary bits, zeros at `zero_fraction`.
template <class Word>
std::vector<Word> random_words(size_t n, double zero_fraction, uint32_t seed) {
  constexpr int bits = sizeof(Word) * 8, mantissa = bits == 32 ? 23 : 7;
  constexpr uint64_t sign = uint64_t{1} << (bits - 1), exponent = (sign - 1) & ~((uint64_t{1} << mantissa) - 1);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> p(0.0, 1.0);
  std::vector<Word> v(n);
  for (Word& w : v) {
    const uint64_t r = rng(), fraction = r & ((uint64_t{1} << mantissa) - 1);
    const double kind = p(rng);
    uint64_t x = r & (sign | exponent | ((uint64_t{1} << mantissa) - 1));  // any bits
    if (kind < zero_fraction) {
      x = 0;
    } else if (kind < zero_fraction + 0.05) {
      x = sign;  // negative zero
    } else if (kind < zero_fraction + 0.10) {
      x = (r & sign) | (fraction | 1);  // a denormal
    } else if (kind < zero_fraction + 0.13) {
      x = (r & sign) | exponent | (fraction | 1);  // a NaN
    } else if (kind < zero_fraction + 0.15) {
      x = (r & sign) | exponent;  // an infinity
    }
    w = static_cast<Word>(x);
  }
  return v;
}

// The sparse form as plainly as it can be said: a bit per element where its bits are not all
// zero, and those elements in order.
template <class Word>
void reference_sparse(std::vector<uint8_t>& bitmap, std::vector<Word>& values, const std::vector<Word>& in) {
  bitmap.assign(tk::sign_bytes(in.size()), 0);
  values.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == 0) continue;
    bitmap[i / 8] = static_cast<uint8_t>(bitmap[i / 8] | (1u << (i % 8)));
    values.push_back(in[i]);
  }
}

// Both kernels on one thread and on several, against the reference, with guard words after the
// bitmap, the values and the decoded tensor that neither may write.
template <class Word>
void check_sparse_against_reference(tk::SparseKernels kernels, size_t n, double zero_fraction) {
  constexpr size_t guard = 64;
  constexpr Word poison = static_cast<Word>(0x5a5a5a5au);
  const std::vector<Word> in = random_words<Word>(n, zero_fraction, static_cast<uint32_t>(n * 31 + 7));
  std::vector<uint8_t> expected_bitmap;
  std::vector<Word> expected_values;
  reference_sparse(expected_bitmap, expected_values, in);
  const size_t count = expected_values.size();
  for (const int threads : {1, 2}) {
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<uint8_t> bitmap(expected_bitmap.size() + guard, 0xa5);
    std::vector<Word> values(count + guard, poison), out(n + guard, poison);
    tk::sparse_encode(bitmap.data(), values.data(), in.data(), n, sizeof(Word), kernels);
    tk::sparse_decode(out.data(), bitmap.data(), values.data(), n, sizeof(Word), kernels);
    omp_set_num_threads(before);
    const std::string where = "n " + std::to_string(n) + ", zeros " + std::to_string(zero_fraction) + ", " +
                              std::to_string(threads) + " threads, " + std::to_string(sizeof(Word)) + "-byte words";
    ASSERT_EQ(0, std::memcmp(bitmap.data(), expected_bitmap.data(), expected_bitmap.size())) << where;
    ASSERT_EQ(0, std::memcmp(values.data(), expected_values.data(), count * sizeof(Word))) << where;
    ASSERT_EQ(0, std::memcmp(out.data(), in.data(), n * sizeof(Word))) << where;
    for (size_t i = 0; i < guard; ++i) {
      ASSERT_EQ(bitmap[expected_bitmap.size() + i], 0xa5) << "bitmap written past its end, " << where;
      ASSERT_EQ(values[count + i], poison) << "values written past their end, " << where;
      ASSERT_EQ(out[n + i], poison) << "decoded past the end, " << where;
    }
  }
}

}  // namespace

TEST(ActivationCodec, SparseKernelsWriteTheReferenceBytes) {
  std::vector<tk::SparseKernels> kernels{tk::SparseKernels::Portable};
  if (tk::detect_sparse_kernels() == tk::SparseKernels::Avx512) kernels.push_back(tk::SparseKernels::Avx512);
  // Lengths that end inside a byte, a 16- and a 32-lane vector and a block, and two that run on
  // several threads.
  for (size_t n : {1u, 5u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 63u, 4095u, 4096u, 4097u, 20493u, 70001u}) {
    for (double zeros : {0.0, 0.3, 0.72, 0.97, 1.0}) {
      for (tk::SparseKernels k : kernels) {
        check_sparse_against_reference<uint32_t>(k, n, zeros);
        check_sparse_against_reference<uint16_t>(k, n, zeros);
      }
    }
  }
}

TEST(ActivationCodec, SparseFormGivesTheSameBits) {
  for (size_t n : {1u, 7u, 9u, 100u, 4095u, 4096u, 4097u, 70001u}) {
    for (double zeros : {0.0, 0.5, 0.95, 1.0}) {
      check_sparse<float>(n, zeros);
      check_sparse<bf16>(n, zeros);
      check_sparse<f16>(n, zeros);
    }
  }
}

TEST(ActivationCodec, SignKeepsWhereTheValueIsPositive) {
  for (size_t n : {1u, 8u, 13u, 4097u, 70001u}) {
    check_sign<float>(n);
    check_sign<bf16>(n);
    check_sign<f16>(n);
  }
}

TEST(ActivationCodec, E4m3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(tk::float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(tk::float_to_e4m3(-1.0f), 0xb8);
  EXPECT_EQ(tk::float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(tk::float_to_e4m3(1e6f), 0x7e);  // saturates: E4M3 has no infinity
  EXPECT_EQ(tk::float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(tk::float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(tk::float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(tk::float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);  // the smallest subnormal
  EXPECT_EQ(tk::float_to_e4m3(std::ldexp(1.0f, -6)), 0x08);  // the smallest normal
  EXPECT_TRUE(std::isnan(tk::e4m3_to_float(tk::float_to_e4m3(std::numeric_limits<float>::quiet_NaN()))));
  // Halfway between 1 and 1.125 goes to the even mantissa (1), between 1.125 and 1.25 to 1.25.
  EXPECT_EQ(tk::e4m3_to_float(tk::float_to_e4m3(1.0625f)), 1.0f);
  EXPECT_EQ(tk::e4m3_to_float(tk::float_to_e4m3(1.1875f)), 1.25f);
  // 464 lies halfway between 448 and the NaN code: it must saturate, not become NaN.
  EXPECT_EQ(tk::float_to_e4m3(464.0f), 0x7e);
  // Every code that is a number comes back to itself.
  for (int c = 0; c < 256; ++c) {
    const float v = tk::e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) continue;
    EXPECT_EQ(tk::float_to_e4m3(v), v == 0 ? (c & 0x80) : c) << "code " << c;
  }
}

TEST(ActivationCodec, Fp8BlocksStayWithinTheirRelativeError) {
  const size_t n = 1000;  // a partial last block
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = normal(rng) * (i < 128 ? 1e-3f : 50.0f);  // blocks of different scales
  for (size_t i = 256; i < 384; ++i) in[i] = 0.0f;                                 // a block of zeros
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(tk::fp8_blocks(n)), out(n);
  tk::fp8_encode(codes.data(), scales.data(), in.data(), n);
  tk::fp8_decode(out.data(), codes.data(), scales.data(), n);
  for (size_t b = 0; b < tk::fp8_blocks(n); ++b) {
    const size_t lo = b * tk::kFp8Block, hi = std::min(n, lo + tk::kFp8Block);
    float amax = 0;
    for (size_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(in[i]));
    for (size_t i = lo; i < hi; ++i) {
      // Normal range: a relative error of at most 2^-4; below it, an absolute one of half the
      // smallest subnormal step of the block's scale.
      const float bound = std::max(std::fabs(in[i]) * 0.0625f, amax / 448.0f * std::ldexp(1.0f, -10));
      ASSERT_LE(std::fabs(out[i] - in[i]), bound * 1.0001f) << "element " << i << " of block " << b;
    }
  }
  for (size_t i = 256; i < 384; ++i) EXPECT_EQ(out[i], 0.0f);
  // bf16 and f16 inputs through the same codes.
  const std::vector<bf16> half = as<bf16>(in);
  std::vector<bf16> half_out(n);
  tk::fp8_encode(codes.data(), scales.data(), half.data(), n);
  tk::fp8_decode(half_out.data(), codes.data(), scales.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const float x = tk::load(half[i]);
    ASSERT_LE(std::fabs(tk::load(half_out[i]) - x), std::fabs(x) * 0.07f + 1e-6f) << "element " << i;
  }
}
