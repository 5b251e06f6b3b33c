#pragma once
// The table the ops tests run over. Every op is one OpCase: its sizes by letter, its tensor
// arguments with their shapes in those letters, and two ways to run it on bound arguments: through
// ops:: and through the CPU kernel directly. The tests (test_ops.cpp) check every case the same
// way: bitwise equal to the kernel, near its f32 run in bf16 and f16, and every malformed
// argument refused with the op's name.
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tessera::ops::testing {

using Sizes = std::map<std::string, int64_t, std::less<>>;

enum class Fill {
  Normal,    // f32, normal(mean, stddev)
  Tokens,    // i32 ids in [0, V)
  Targets,   // i32 ids in [0, V), every 7th row kIgnoreIndex
  Codes,     // u8 indexes in [0, K) of an 8-bit codebook
  Codebook,  // f32, K sorted values from -1 to 1 in equal steps
};
inline constexpr int kIgnoreIndex = -100;

struct ArgSpec {
  std::string name;
  std::vector<std::string> dims;  // letters of the case's Sizes
  Fill fill = Fill::Normal;
  bool optional = false;  // undefined in the case's second run
  std::string alias;      // when set, this argument is that argument's tensor (in-place variants)
  double mean = 0.0, stddev = 1.0;
  // A parameter gradient or a statistic (kernels/cpu/element.h): f32 whatever the dtype of the
  // floating operands, so it stays f32 when they are bf16 or f16.
  bool accumulator = false;
};

// The tensors of one run, by name (undefined for optional arguments left out), and the sizes.
class Args {
 public:
  explicit Args(const Sizes& sizes) : sizes_(&sizes) {}

  void set(const std::string& name, Tensor t);
  const Tensor& operator[](std::string_view name) const;  // throws std::logic_error for a name not bound
  float* f(std::string_view name) const;                  // null when undefined, as kernels take "none"
  const int32_t* i(std::string_view name) const;
  int n(std::string_view letter) const;
  int64_t* count() const { return &count_; }  // the out-parameter of cross_entropy_forward
  int64_t count_value() const { return count_; }
  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }

 private:
  const Sizes* sizes_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  mutable int64_t count_ = -1;
};

// What one run returns besides its tensors (the losses' sum or mean; 0 for void ops).
using Run = std::function<double(const Args&)>;

struct OpCase {
  std::string op;       // the name after "ops::", which every error of the op starts with
  std::string variant;  // "" or e.g. "in_place"
  Sizes sizes;
  std::vector<ArgSpec> args;
  std::set<std::string> free_dims;  // letters whose size is not constrained by another argument
  Run via_ops;
  Run via_kernel;
  bool writes = true;  // false: the op only reads its tensors (its result is what it gives)

  std::string test_name() const { return variant.empty() ? op : op + "_" + variant; }
  bool has_optional() const;
};

// gtest prints a case by its name.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.test_name(); }

// Every op, and the in-place variants of those that allow aliasing.
std::vector<OpCase> op_cases();
std::vector<OpCase> in_place_cases();
// The optimizer updates (optimizer_cases.cpp): f32 alone, 1-D runs of one length.
std::vector<OpCase> optimizer_cases();

}  // namespace tessera::ops::testing
