#include "kernels/cpu/low_rank.h"

#include <algorithm>
#include <vector>

namespace tessera::kernels {

namespace {

// The ranks PowerSGD runs at (its default 4, the small ones of its ramp) get a loop whose width the
// compiler knows; any other rank takes the same arithmetic with a run-time width.
template <class Body>
void with_rank(int64_t rank, Body body) {
  switch (rank) {
    case 1: return body.template operator()<1>(1);
    case 2: return body.template operator()<2>(2);
    case 4: return body.template operator()<4>(4);
    case 8: return body.template operator()<8>(8);
    default: return body.template operator()<0>(rank);
  }
}

// Width K when known at compile time (> 0), else `rank`.
template <int K>
constexpr int64_t width(int64_t rank) {
  return K > 0 ? K : rank;
}

}  // namespace

void low_rank_project(const float* m, int64_t rows, int64_t cols, const float* q, int64_t q_stride, int64_t rank,
                      float* p) {
  with_rank(rank, [&]<int K>(int64_t r) {
    std::vector<float> buffer(K > 0 ? 0 : static_cast<size_t>(r));
    float fixed[K > 0 ? K : 1];
    float* acc = K > 0 ? fixed : buffer.data();
    for (int64_t i = 0; i < rows; ++i) {
      std::fill(acc, acc + width<K>(r), 0.0f);
      const float* row = m + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float mij = row[j];
        const float* qj = q + j * q_stride;
        for (int64_t k = 0; k < width<K>(r); ++k) acc[k] += mij * qj[k];
      }
      std::copy(acc, acc + width<K>(r), p + i * r);
    }
  });
}

void low_rank_project_transposed(const float* m, int64_t rows, int64_t cols, const float* p, int64_t rank, float* q) {
  std::fill(q, q + cols * rank, 0.0f);
  with_rank(rank, [&]<int K>(int64_t r) {
    std::vector<float> buffer(K > 0 ? 0 : static_cast<size_t>(r));
    float fixed[K > 0 ? K : 1];
    float* pi = K > 0 ? fixed : buffer.data();
    for (int64_t i = 0; i < rows; ++i) {
      std::copy(p + i * r, p + (i + 1) * r, pi);
      const float* row = m + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float mij = row[j];
        float* qj = q + j * r;
        for (int64_t k = 0; k < width<K>(r); ++k) qj[k] += mij * pi[k];
      }
    }
  });
}

void low_rank_reconstruct(float* m, float* error, int64_t rows, int64_t cols, const float* p, const float* q,
                          int64_t rank, float group_size) {
  with_rank(rank, [&]<int K>(int64_t r) {
    for (int64_t i = 0; i < rows; ++i) {
      const float* pi = p + i * r;
      float* mi = m + i * cols;
      float* ei = error + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float* qj = q + j * r;
        float approx = 0;
        for (int64_t k = 0; k < width<K>(r); ++k) approx += pi[k] * qj[k];
        ei[j] = mi[j] - approx / group_size;
        mi[j] = approx;
      }
    }
  });
}

}  // namespace tessera::kernels
