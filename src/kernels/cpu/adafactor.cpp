#include "kernels/cpu/adafactor.h"

#include <cmath>

namespace tessera::kernels {

namespace {

// U = g / √V̂ of owned element `local`, whole-tensor element `element`: the same expression in
// the update's two passes.
inline double unclipped(const float* grad, const AdafactorMoment& moment, const AdafactorLayout& layout, int64_t local,
                        int64_t element) {
  double second;
  if (layout.factored()) {
    const int64_t matrix = element / layout.group_size;
    second = double(moment.row[element / layout.cols]) *
             double(moment.col[matrix * layout.cols + element % layout.cols]) / moment.row_totals[matrix];
  } else {
    second = double(moment.v[local]);
  }
  return double(grad[local]) / std::sqrt(second);
}

}  // namespace

void adafactor_sums(const float* value, const float* grad, const ElementRun* runs, size_t run_count,
                    const AdafactorLayout& layout, double eps1, double* row_sums, double* col_sums,
                    double* weight_squares) {
  for (size_t r = 0; r < run_count; ++r) {
    const ElementRun run = runs[r];
    for (int64_t j = 0; j < run.length; ++j) {
      const int64_t i = run.local + j, element = run.global + j;
      const int64_t group = element / layout.group_size;
      weight_squares[group] += double(value[i]) * double(value[i]);
      if (layout.factored()) {
        const double square = double(grad[i]) * double(grad[i]) + eps1;
        row_sums[element / layout.cols] += square;
        col_sums[group * layout.cols + element % layout.cols] += square;
      }
    }
  }
}

void adafactor_factored_moment(float* row, float* col, const double* row_sums, const double* col_sums,
                               const AdafactorLayout& layout, float old_weight, float new_weight, double* row_totals) {
  const int64_t rows = layout.matrices * layout.rows;
  for (int64_t k = 0; k < layout.matrices; ++k) row_totals[k] = 0.0;
  for (int64_t i = 0; i < rows; ++i) {
    row[i] = old_weight * row[i] + new_weight * static_cast<float>(row_sums[i]);
    row_totals[i / layout.rows] += row[i];
  }
  for (int64_t j = 0; j < layout.matrices * layout.cols; ++j) {
    col[j] = old_weight * col[j] + new_weight * static_cast<float>(col_sums[j]);
  }
}

void adafactor_vector_moment(float* v, const float* grad, size_t n, float old_weight, float new_weight, float eps1) {
  for (size_t i = 0; i < n; ++i) {
    const float square = grad[i] * grad[i] + eps1;
    v[i] = old_weight * v[i] + new_weight * square;
  }
}

void adafactor_update_squares(const float* grad, const AdafactorMoment& moment, const ElementRun* runs,
                              size_t run_count, const AdafactorLayout& layout, double* update_squares) {
  for (size_t r = 0; r < run_count; ++r) {
    const ElementRun run = runs[r];
    for (int64_t j = 0; j < run.length; ++j) {
      const int64_t element = run.global + j;
      const double u = unclipped(grad, moment, layout, run.local + j, element);
      update_squares[element / layout.group_size] += u * u;
    }
  }
}

void adafactor_apply(float* value, const float* grad, float* m, const AdafactorMoment& moment, const ElementRun* runs,
                     size_t run_count, const AdafactorLayout& layout, const AdafactorGroupStep* groups, float beta1) {
  const auto b1 = static_cast<double>(beta1);
  for (size_t r = 0; r < run_count; ++r) {
    const ElementRun run = runs[r];
    for (int64_t j = 0; j < run.length; ++j) {
      const int64_t i = run.local + j, element = run.global + j;
      const AdafactorGroupStep& k = groups[element / layout.group_size];
      double u = unclipped(grad, moment, layout, i, element) / k.clip;
      if (m != nullptr) {
        m[i] = static_cast<float>(b1 * double(m[i]) + (1.0 - b1) * u);
        u = m[i];
      }
      value[i] = static_cast<float>(k.decay * double(value[i]) - k.alpha * u);
    }
  }
}

}  // namespace tessera::kernels
