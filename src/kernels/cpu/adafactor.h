#pragma once
// Adafactor's per-element passes (optim/adafactor.h gives the algorithm) over the elements of one
// tensor that a rank owns. Its statistics are of the whole tensor (row and column sums of a matrix,
// RMS of a group's update and weights), while a rank may own a tensor-parallel block of it, a ZeRO
// shard, or both: so each pass places an element by its index in the whole tensor, given as runs
// (ElementRun) of owned elements that lie consecutively in it. The runs leave out padding elements,
// which take no part in any statistic and are never updated. Element g of the whole tensor is, in
// its AdafactorLayout, in group g / group_size; when factored, in row g / cols (counting the rows
// of every matrix of a stack) and column g % cols of matrix g / group_size.
//
// A step runs, per tensor (the sums reduced over the ranks that hold parts of it between them):
//   adafactor_sums: Σ w² per group, and row and column sums of g² + eps1 when factored;
//   adafactor_factored_moment / adafactor_vector_moment: R, C (and ΣR per matrix) or v advanced;
//   adafactor_update_squares: Σ U² per group, U = g / √V̂, V̂ = R_row · C_col / ΣR or v;
//   adafactor_apply: u = U / clip (or the first moment m = β1·m + (1 − β1)·u), w = decay·w − α·u,
//     with clip, α and decay of the element's group.
// Sums are in double, each in element order; U is formed the same way in both of its passes, so
// the clip measures exactly the update applied.
#include <cstddef>
#include <cstdint>

namespace tessera::kernels {

// Owned elements [local, local + length) (the rank's flat order of its part) are the whole
// tensor's elements [global, global + length).
struct ElementRun {
  int64_t local = 0;
  int64_t global = 0;
  int64_t length = 0;
};

// How a tensor's statistics are kept: rows > 0, factored, as `matrices` matrices of rows × cols
// (groups = matrices, group_size = rows · cols); rows == 0, a second moment per element, the
// tensor's `groups` groups of group_size elements each kept apart (their RMS, their step).
struct AdafactorLayout {
  int64_t matrices = 0, rows = 0, cols = 0;
  int64_t groups = 1, group_size = 1;
  bool factored() const { return rows > 0; }
};

// What the apply pass takes of each group: the divisor of its update (max(1, RMS(U) / d)), its
// step α and its decay factor 1 − αλ.
struct AdafactorGroupStep {
  double clip = 1, alpha = 0, decay = 1;
};

// The second moment an update divides by: a factored tensor's R [matrices·rows], C [matrices·cols]
// and ΣR per matrix, or (row null) v per owned element.
struct AdafactorMoment {
  const float* row = nullptr;
  const float* col = nullptr;
  const double* row_totals = nullptr;
  const float* v = nullptr;
};

// weight_squares[group] += w²; when factored, row_sums[row] and col_sums[matrix·cols + column]
// += g² + eps1 (row_sums [matrices·rows], col_sums [matrices·cols]; unread otherwise).
void adafactor_sums(const float* value, const float* grad, const ElementRun* runs, size_t run_count,
                    const AdafactorLayout& layout, double eps1, double* row_sums, double* col_sums,
                    double* weight_squares);
// R = old·R + new·row_sums, C = old·C + new·col_sums (in f32), and row_totals[matrix] = ΣR of
// each matrix after the update.
void adafactor_factored_moment(float* row, float* col, const double* row_sums, const double* col_sums,
                               const AdafactorLayout& layout, float old_weight, float new_weight, double* row_totals);
// v = old·v + new·(g² + eps1) over n elements (every owned element, padding included).
void adafactor_vector_moment(float* v, const float* grad, size_t n, float old_weight, float new_weight, float eps1);
// update_squares[group] += U².
void adafactor_update_squares(const float* grad, const AdafactorMoment& moment, const ElementRun* runs,
                              size_t run_count, const AdafactorLayout& layout, double* update_squares);
// The update of the runs' elements, groups [groups of the layout]; m (null: no first moment) is
// per owned element, as grad and value.
void adafactor_apply(float* value, const float* grad, float* m, const AdafactorMoment& moment, const ElementRun* runs,
                     size_t run_count, const AdafactorLayout& layout, const AdafactorGroupStep* groups, float beta1);

}  // namespace tessera::kernels
