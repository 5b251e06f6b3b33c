#include "kernels/cpu/embedding.h"

#include <cstddef>

#include "core/check.h"
#include "kernels/cpu/parallel.h"

namespace tessera::kernels {

template <class T>
void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tn, int C, int V) {
  TS_CHECK(B >= 0 && Tn >= 0 && C > 0 && V > 0, "embedding_forward: bad shape B={} T={} C={} V={}", B, Tn, C, V);
  // Validate every id before the parallel loop: an exception must not leave an OpenMP region.
  const size_t rows = static_cast<size_t>(B) * Tn;
  for (size_t r = 0; r < rows; ++r) {
    const int32_t id = tokens[r];
    TS_CHECK(id >= 0 && id < V,
             "embedding: token id {} at position (b={}, t={}) is outside the vocabulary [0, {}); the data was "
             "tokenized with a different vocabulary than the model's vocab_size",
             id, r / Tn, r % Tn, V);
  }
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * c_size))
  for (size_t r = 0; r < rows; ++r) {
    const T* e = wte + static_cast<size_t>(tokens[r]) * c_size;
    T* o = out + r * c_size;
    if (wpe != nullptr) {
      const T* p = wpe + (r % Tn) * c_size;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = store<T>(load(e[c]) + load(p[c]));
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c];
    }
  }
}

template <class T>
void embedding_backward(compute_t<T>* dwte, compute_t<T>* dwpe, const T* dout, const int32_t* tokens, int B, int Tn,
                        int C) {
  TS_CHECK(B >= 0 && Tn >= 0 && C > 0, "embedding_backward: bad shape B={} T={} C={}", B, Tn, C);
  const size_t rows = static_cast<size_t>(B) * Tn;
  const size_t c_size = static_cast<size_t>(C);
  // Repeated tokens hit the same dwte row, so rows cannot be split among threads; columns can.
  // Rows are visited in order within each column range, so the sums are deterministic.
  detail::for_column_ranges(C, rows * c_size, [&](int c0, int c1) {
    for (size_t r = 0; r < rows; ++r) {
      const T* d = dout + r * c_size;
      compute_t<T>* g = dwte + static_cast<size_t>(tokens[r]) * c_size;
#pragma omp simd
      for (int c = c0; c < c1; ++c) g[c] += load(d[c]);
      if (dwpe != nullptr) {
        compute_t<T>* gp = dwpe + (r % Tn) * c_size;
#pragma omp simd
        for (int c = c0; c < c1; ++c) gp[c] += load(d[c]);
      }
    }
  });
}

template <class T>
void embedding_rows_forward(T* out, const int32_t* tokens, const T* table, int B, int Tn, int C, int first, int V) {
  TS_CHECK(B >= 0 && Tn >= 0 && C > 0 && V > 0 && first >= 0, "embedding_rows_forward: bad shape B={} T={} C={} "
           "rows {}..{}", B, Tn, C, first, first + V);
  const size_t rows = static_cast<size_t>(B) * Tn;
  const size_t c_size = static_cast<size_t>(C);
#pragma omp parallel for schedule(static) if (detail::worth_parallel(rows * c_size))
  for (size_t r = 0; r < rows; ++r) {
    T* o = out + r * c_size;
    const int32_t row = tokens[r] - first;
    if (row < 0 || row >= V) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = store<T>(0);
      continue;
    }
    const T* e = table + static_cast<size_t>(row) * c_size;
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = e[c];
  }
}

template <class T>
void embedding_rows_backward(compute_t<T>* dtable, const T* dout, const int32_t* tokens, int B, int Tn, int C,
                             int first, int V) {
  TS_CHECK(B >= 0 && Tn >= 0 && C > 0 && V > 0 && first >= 0, "embedding_rows_backward: bad shape B={} T={} C={} "
           "rows {}..{}", B, Tn, C, first, first + V);
  const size_t rows = static_cast<size_t>(B) * Tn;
  const size_t c_size = static_cast<size_t>(C);
  // As embedding_backward: columns split among threads, rows in order, deterministic sums.
  detail::for_column_ranges(C, rows * c_size, [&](int c0, int c1) {
    for (size_t r = 0; r < rows; ++r) {
      const int32_t row = tokens[r] - first;
      if (row < 0 || row >= V) continue;
      const T* d = dout + r * c_size;
      compute_t<T>* g = dtable + static_cast<size_t>(row) * c_size;
#pragma omp simd
      for (int c = c0; c < c1; ++c) g[c] += load(d[c]);
    }
  });
}

template <class T>
void positions_forward(T* out, const T* wpe, int B, int Tn, int C) {
  const size_t block = static_cast<size_t>(Tn) * static_cast<size_t>(C);
  for (int b = 0; b < B; ++b) {
    T* o = out + static_cast<size_t>(b) * block;
    detail::for_element_blocks(block, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
      for (size_t i = lo; i < hi; ++i) o[i] = store<T>(load(o[i]) + load(wpe[i]));
    });
  }
}

template <class T>
void positions_backward(compute_t<T>* dwpe, const T* dout, int B, int Tn, int C) {
  const size_t block = static_cast<size_t>(Tn) * static_cast<size_t>(C);
  // Sequences in order for every element: the sums do not depend on the thread count.
  for (int b = 0; b < B; ++b) {
    const T* d = dout + static_cast<size_t>(b) * block;
    detail::for_element_blocks(block, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
      for (size_t i = lo; i < hi; ++i) dwpe[i] += load(d[i]);
    });
  }
}

template void embedding_rows_forward<float>(float*, const int32_t*, const float*, int, int, int, int, int);
template void embedding_rows_forward<double>(double*, const int32_t*, const double*, int, int, int, int, int);
template void embedding_rows_backward<float>(float*, const float*, const int32_t*, int, int, int, int, int);
template void embedding_rows_backward<double>(double*, const double*, const int32_t*, int, int, int, int, int);
template void positions_forward<float>(float*, const float*, int, int, int);
template void positions_forward<double>(double*, const double*, int, int, int);
template void positions_backward<float>(float*, const float*, int, int, int);
template void positions_backward<double>(double*, const double*, int, int, int);
template void embedding_forward<float>(float*, const int32_t*, const float*, const float*, int, int, int, int);
template void embedding_forward<double>(double*, const int32_t*, const double*, const double*, int, int, int, int);
template void embedding_backward<float>(float*, float*, const float*, const int32_t*, int, int, int);
template void embedding_backward<double>(double*, double*, const double*, const int32_t*, int, int, int);
template void embedding_rows_forward<bf16>(bf16*, const int32_t*, const bf16*, int, int, int, int, int);
template void embedding_rows_forward<f16>(f16*, const int32_t*, const f16*, int, int, int, int, int);
template void embedding_rows_backward<bf16>(float*, const bf16*, const int32_t*, int, int, int, int, int);
template void embedding_rows_backward<f16>(float*, const f16*, const int32_t*, int, int, int, int, int);
template void positions_forward<bf16>(bf16*, const bf16*, int, int, int);
template void positions_forward<f16>(f16*, const f16*, int, int, int);
template void positions_backward<bf16>(float*, const bf16*, int, int, int);
template void positions_backward<f16>(float*, const f16*, int, int, int);
template void embedding_forward<bf16>(bf16*, const int32_t*, const bf16*, const bf16*, int, int, int, int);
template void embedding_forward<f16>(f16*, const int32_t*, const f16*, const f16*, int, int, int, int);
template void embedding_backward<bf16>(float*, float*, const bf16*, const int32_t*, int, int, int);
template void embedding_backward<f16>(float*, float*, const f16*, const int32_t*, int, int, int);

}  // namespace tessera::kernels
