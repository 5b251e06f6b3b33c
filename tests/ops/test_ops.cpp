// Every op of the table (op_cases.cpp) is checked the same way:
//   - through ops:: and through its CPU kernel on the same random data, bitwise equal outputs
//     (with its optional arguments given and left out);
//   - each argument in turn with a wrong shape (every dimension one larger, unless the op leaves
//     that size free, and one dimension too many), a wrong dtype, a non-contiguous view, or
//     missing, is refused with a message that names the op and the argument;
//   - its floating operands in bf16 and in f16 (accumulators in f32), near its f32 run on the
//     same values.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/allocator.h"
#include "core/check.h"
#include "core/rng.h"
#include "op_cases.h"
#include "ops/ops.h"

namespace tessera::ops::testing {
namespace {

constexpr uint64_t kDataSeed = 1234;

Shape shape_of(const OpCase& c, const ArgSpec& a) {
  Shape s;
  for (const std::string& letter : a.dims) s.push_back(c.sizes.at(letter));
  return s;
}

DType dtype_of(const ArgSpec& a) {
  if (a.fill == Fill::Normal || a.fill == Fill::Codebook) return DType::F32;
  return a.fill == Fill::Codes ? DType::U8 : DType::I32;
}

// The same values on every call: they depend only on the op, the argument and the index.
Tensor random_tensor(const OpCase& c, const ArgSpec& a, MemoryAccountant& accountant) {
  Tensor t = Tensor::empty(shape_of(c, a), dtype_of(a), MemoryTag::Workspace, accountant);
  const uint64_t stream = stream_id((c.op + "/" + a.name).c_str());
  const auto n = static_cast<uint64_t>(t.numel());
  if (a.fill == Fill::Normal) {
    float* p = t.data<float>();
    for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<float>(a.mean + a.stddev * normal(kDataSeed, stream, i));
    return t;
  }
  if (a.fill == Fill::Codebook) {
    float* p = t.data<float>();
    const float step = n > 1 ? 2.0f / static_cast<float>(n - 1) : 0.0f;
    for (uint64_t i = 0; i < n; ++i) p[i] = -1.0f + step * static_cast<float>(i);
    return t;
  }
  if (a.fill == Fill::Codes) {
    const auto K = static_cast<float>(c.sizes.at("K"));
    uint8_t* p = t.data<uint8_t>();
    for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(std::floor(uniform(kDataSeed, stream, i) * K));
    return t;
  }
  const auto V = static_cast<float>(c.sizes.at("V"));
  int32_t* p = t.data<int32_t>();
  for (uint64_t i = 0; i < n; ++i) {
    p[i] = static_cast<int32_t>(std::floor(uniform(kDataSeed, stream, i) * V));
    if (a.fill == Fill::Targets && i % 7 == 3) p[i] = kIgnoreIndex;
  }
  return t;
}

// Every argument of c on fresh random tensors; optional ones undefined unless with_optional.
Args bind(const OpCase& c, bool with_optional, MemoryAccountant& accountant) {
  Args args(c.sizes);
  for (const ArgSpec& a : c.args) {
    if (!a.alias.empty()) continue;
    args.set(a.name, a.optional && !with_optional ? Tensor() : random_tensor(c, a, accountant));
  }
  for (const ArgSpec& a : c.args) {
    if (!a.alias.empty()) args.set(a.name, args[a.alias]);
  }
  return args;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Whether `word` appears in text as a name of its own (not inside a longer identifier).
bool mentions(const std::string& text, const std::string& word) {
  auto is_ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  for (size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !is_ident(text[at - 1]);
    const bool ends = at + word.size() == text.size() || !is_ident(text[at + word.size()]);
    if (starts && ends) return true;
  }
  return false;
}

// Runs c through ops:: and through its kernel on the same data: every tensor and the returned
// value must have the same bits, and the op must have written something.
void expect_matches_kernel(const OpCase& c) {
  for (bool with_optional : {true, false}) {
    if (!with_optional && !c.has_optional()) continue;
    SCOPED_TRACE(with_optional ? "optional arguments given" : "optional arguments undefined");
    MemoryAccountant accountant;
    const Args before = bind(c, with_optional, accountant);
    const Args via_ops = bind(c, with_optional, accountant);
    const Args via_kernel = bind(c, with_optional, accountant);
    const double result_ops = c.via_ops(via_ops);
    const double result_kernel = c.via_kernel(via_kernel);
    EXPECT_EQ(std::bit_cast<uint64_t>(result_ops), std::bit_cast<uint64_t>(result_kernel))
        << result_ops << " vs " << result_kernel;
    EXPECT_EQ(via_ops.count_value(), via_kernel.count_value());
    bool wrote = false;
    for (const auto& [name, tensor] : via_ops.tensors()) {
      EXPECT_TRUE(same_bits(tensor, via_kernel[name])) << name << " differs from the kernel's";
      wrote = wrote || !same_bits(tensor, before[name]);
    }
    if (c.writes) {
      EXPECT_TRUE(wrote) << "ops::" << c.op << " changed no tensor";
    } else {
      EXPECT_FALSE(wrote) << "ops::" << c.op << " only reads, and changed a tensor";
    }
  }
}

bool is_operand(const ArgSpec& a) { return a.fill == Fill::Normal && !a.accumulator && a.alias.empty(); }

// t's values in f32, f32 itself or rounded from bf16 or f16.
std::vector<float> values_of(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::F32) std::memcpy(v.data(), t.raw(), t.nbytes());
  if (t.dtype() == DType::BF16) convert_bf16_to_f32(v.data(), t.data<bf16>(), v.size());
  if (t.dtype() == DType::F16) convert_f16_to_f32(v.data(), t.data<f16>(), v.size());
  return v;
}

// ||a - b|| / ||b||, or ||a - b|| when b is zero.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Runs c with its floating operands in bf16, then in f16, accumulators and indices as they are
// (f32, i32), against its f32 run on the same values: the random values rounded to the 16-bit
// type, so that the two runs differ only in what the 16-bit kernels round. Every floating tensor
// and the returned value must be within a relative norm error ||a - b|| / ||b|| of
//   bf16  1e-2: one rounding to nearest of each output is at most 2^-8 relative per element,
//         about 2^-9 in norm over values spread across their binades;
//   f16   2e-3: the same with 2^-11, about 2^-12 in norm;
// plus what the op accumulates, which runs in f32 in both runs (sums, statistics, parameter
// gradients: K 2^-24 over K terms; a 16-bit GEMM may sum in another order). That leaves 2.5 and 4
// times the worst case of one rounding: a wrong 16-bit kernel (a misplaced term, an intermediate
// rounded before a cancellation, a value read in the wrong type) falls far outside, though an
// output truncated instead of rounded (twice the error, never more than 2^-7 or 2^-10) does not.
void expect_near_f32_in_16_bits(const OpCase& c) {
  struct Precision {
    DType dtype;
    double tolerance;
  };
  for (const Precision p : {Precision{DType::BF16, 1e-2}, Precision{DType::F16, 2e-3}}) {
    for (bool with_optional : {true, false}) {
      if (!with_optional && !c.has_optional()) continue;
      SCOPED_TRACE(std::string(dtype_name(p.dtype)) +
                   (with_optional ? ", optional arguments given" : ", optional arguments undefined"));
      MemoryAccountant accountant;
      Args wide = bind(c, with_optional, accountant);
      Args half(c.sizes);
      for (const ArgSpec& a : c.args) {
        if (!a.alias.empty()) continue;
        const Tensor& t = wide[a.name];
        if (!t.defined()) {
          half.set(a.name, Tensor());
          continue;
        }
        Tensor h = Tensor::empty(t.shape(), is_operand(a) ? p.dtype : t.dtype(), MemoryTag::Workspace, accountant);
        if (!is_operand(a)) {
          std::memcpy(h.raw(), t.raw(), t.nbytes());
        } else if (p.dtype == DType::BF16) {
          convert_f32_to_bf16(h.data<bf16>(), t.data<float>(), static_cast<size_t>(t.numel()));
        } else {
          convert_f32_to_f16(h.data<f16>(), t.data<float>(), static_cast<size_t>(t.numel()));
        }
        if (is_operand(a)) {
          const std::vector<float> rounded = values_of(h);
          std::memcpy(t.raw(), rounded.data(), t.nbytes());
        }
        half.set(a.name, h);
      }
      for (const ArgSpec& a : c.args) {
        if (!a.alias.empty()) half.set(a.name, half[a.alias]);
      }
      const double result_wide = c.via_ops(wide);
      const double result_half = c.via_ops(half);
      EXPECT_EQ(half.count_value(), wide.count_value());
      const double result_error =
          std::fabs(result_half - result_wide) / (result_wide != 0 ? std::fabs(result_wide) : 1.0);
      EXPECT_LE(result_error, p.tolerance) << result_half << " vs " << result_wide;
      double worst = result_error;
      std::string worst_name = "result";
      for (const auto& [name, tensor] : wide.tensors()) {
        if (!tensor.defined() || tensor.dtype() == DType::I32) continue;
        const double error = relative_error(values_of(half[name]), values_of(tensor));
        EXPECT_LE(error, p.tolerance) << name << " in " << dtype_name(p.dtype) << " is off its f32 run";
        if (error > worst) {
          worst = error;
          worst_name = name;
        }
      }
      if (with_optional) {
        std::printf("[ %-4s ] %-34s worst relative error %.2e (%s)\n", std::string(dtype_name(p.dtype)).c_str(),
                    c.test_name().c_str(), worst, worst_name.c_str());
      }
    }
  }
}

class OpTest : public ::testing::TestWithParam<OpCase> {
 protected:
  const OpCase& op_case() const { return GetParam(); }

  // The op must refuse args with a tessera::Error whose message starts with "ops::<op>: ",
  // names `arg` (unless empty) and contains `text`.
  void expect_refused(const Args& args, const std::string& arg, const std::string& text) const {
    const OpCase& c = op_case();
    try {
      c.via_ops(args);
    } catch (const Error& e) {
      std::string message = e.what();
      // Only the message proper: the file:line suffix quotes the failed condition's code.
      message = message.substr(0, message.rfind(" [ops/"));
      EXPECT_EQ(message.rfind("ops::" + c.op + ": ", 0), 0u) << message;
      if (!arg.empty()) {
        EXPECT_TRUE(mentions(message, arg)) << "the message does not name " << arg << ": " << message;
      }
      EXPECT_NE(message.find(text), std::string::npos) << "expected '" << text << "' in: " << message;
      return;
    }
    ADD_FAILURE() << "ops::" << c.op << " accepted the arguments";
  }

  // Each argument in turn with every dimension one larger (unless the op leaves that size free),
  // and with one dimension too many, is refused.
  void expect_wrong_shapes_refused() {
    const OpCase& c = op_case();
    for (const ArgSpec& a : c.args) {
      const Shape good = shape_of(c, a);
      std::vector<Shape> wrong;
      for (size_t d = 0; d < good.size(); ++d) {
        if (c.free_dims.count(a.dims[d]) != 0) continue;
        Shape s = good;
        ++s[d];
        wrong.push_back(s);
      }
      Shape extra = good;
      extra.push_back(2);
      wrong.push_back(extra);
      for (const Shape& s : wrong) {
        SCOPED_TRACE(a.name + " " + shape_to_string(s) + " instead of " + shape_to_string(good));
        Args args = bind(c, true, accountant_);
        args.set(a.name, Tensor::zeros(s, dtype_of(a), MemoryTag::Workspace, accountant_));
        expect_refused(args, a.name, "shape");
      }
    }
  }

  // Each required argument in turn undefined is refused.
  void expect_missing_arguments_refused() {
    const OpCase& c = op_case();
    for (const ArgSpec& a : c.args) {
      if (a.optional) continue;
      SCOPED_TRACE(a.name + " undefined");
      Args args = bind(c, true, accountant_);
      args.set(a.name, Tensor());
      expect_refused(args, a.name, "undefined");
    }
  }

  MemoryAccountant accountant_;
};

TEST_P(OpTest, MatchesTheKernelBitwise) { expect_matches_kernel(op_case()); }

TEST_P(OpTest, RefusesAWrongShapeOfEachArgument) { expect_wrong_shapes_refused(); }

TEST_P(OpTest, RunsInBf16AndF16NearItsF32Run) { expect_near_f32_in_16_bits(op_case()); }

TEST_P(OpTest, RefusesAWrongDtypeOfEachArgument) {
  const OpCase& c = op_case();
  const auto operands = std::count_if(c.args.begin(), c.args.end(), is_operand);
  for (const ArgSpec& a : c.args) {
    // A floating operand among f32 ones in bf16, an accumulator in bf16; an index argument in f32.
    const DType wrong = a.fill == Fill::Normal ? DType::BF16 : DType::F32;
    SCOPED_TRACE(a.name + " in " + std::string(dtype_name(wrong)));
    Args args = bind(c, true, accountant_);
    args.set(a.name, Tensor::zeros(shape_of(c, a), wrong, MemoryTag::Workspace, accountant_));
    if (is_operand(a) && operands == 1) {
      // The op's only floating operand sets the call's dtype: bf16 with f32 accumulators is a
      // mixed-precision call, not a wrong one.
      EXPECT_NO_THROW(c.via_ops(args));
      continue;
    }
    expect_refused(args, a.name,
                   a.accumulator ? "parameter gradients and statistics are f32 whatever the operands' dtype" : "dtype");
  }
}

TEST_P(OpTest, RefusesANonContiguousViewOfEachArgument) {
  const OpCase& c = op_case();
  int views = 0;
  for (const ArgSpec& a : c.args) {
    Shape s = shape_of(c, a);
    const int d = static_cast<int>(s.size());
    // Only a transpose of two dimensions longer than 1 changes the layout.
    if (d < 2 || s[d - 1] == 1 || s[d - 2] == 1) continue;
    SCOPED_TRACE(a.name + " transposed");
    std::swap(s[d - 1], s[d - 2]);
    const Tensor view = Tensor::zeros(s, dtype_of(a), MemoryTag::Workspace, accountant_).transpose(d - 2, d - 1);
    ASSERT_FALSE(view.is_contiguous());
    Args args = bind(c, true, accountant_);
    args.set(a.name, view);
    expect_refused(args, a.name, "contiguous");
    ++views;
  }
  EXPECT_GT(views, 0) << "no argument of ops::" << c.op << " could be made non-contiguous";
}

TEST_P(OpTest, RefusesEachRequiredArgumentMissing) { expect_missing_arguments_refused(); }

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.test_name(); }

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(op_cases()), case_name);

// The ops that document aliasing, run in place, against their kernels run in place.
class OpInPlaceTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpInPlaceTest, MatchesTheKernelBitwise) { expect_matches_kernel(GetParam()); }

TEST_P(OpInPlaceTest, RunsInBf16AndF16NearItsF32Run) { expect_near_f32_in_16_bits(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, OpInPlaceTest, ::testing::ValuesIn(in_place_cases()), case_name);

// The optimizer updates: f32 alone (master values, gradients and state whatever the compute
// dtype), so no 16-bit run; 1-D, so no strided view of them exists.
class OptimizerOpTest : public OpTest {};

TEST_P(OptimizerOpTest, MatchesTheKernelBitwise) { expect_matches_kernel(op_case()); }

TEST_P(OptimizerOpTest, RefusesAWrongShapeOfEachArgument) { expect_wrong_shapes_refused(); }

TEST_P(OptimizerOpTest, RefusesEachArgumentInAnotherDtype) {
  const OpCase& c = op_case();
  for (const ArgSpec& a : c.args) {
    const bool codes = a.fill == Fill::Codes;
    const std::vector<DType> wrong_dtypes =
        codes ? std::vector<DType>{DType::F32, DType::I8} : std::vector<DType>{DType::BF16, DType::F16, DType::I32};
    for (DType wrong : wrong_dtypes) {
      SCOPED_TRACE(a.name + " in " + std::string(dtype_name(wrong)));
      Args args = bind(c, true, accountant_);
      args.set(a.name, Tensor::zeros(shape_of(c, a), wrong, MemoryTag::Workspace, accountant_));
      expect_refused(args, a.name,
                     codes ? "must hold u8 bytes" : "master values, their gradients and optimizer state are f32");
    }
  }
}

TEST_P(OptimizerOpTest, RefusesEachRequiredArgumentMissing) { expect_missing_arguments_refused(); }

INSTANTIATE_TEST_SUITE_P(Ops, OptimizerOpTest, ::testing::ValuesIn(optimizer_cases()), case_name);

// Adafactor's runs place owned elements in the whole tensor: a run past the owned elements or
// past the tensor, a table of the wrong size and a layout the kernels cannot index are refused.
TEST(OpsAdafactor, RefusesRunsOutsideTheOwnedElementsOrTheTensorAndTablesOfOtherSizes) {
  MemoryAccountant accountant;
  const Tensor value = Tensor::zeros({10}, DType::F32, MemoryTag::Workspace, accountant);
  const Tensor grad = Tensor::zeros({10}, DType::F32, MemoryTag::Workspace, accountant);
  const AdafactorLayout two_groups{0, 0, 0, 2, 8};  // a tensor of 16 elements
  std::vector<double> squares(2), none;
  auto refused = [&](std::span<const ElementRun> runs, const AdafactorLayout& layout, std::span<double> weights,
                     const std::string& text) {
    try {
      adafactor_sums(value, grad, runs, layout, 1e-30, none, none, weights);
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("ops::adafactor_sums: ", 0), 0u) << message;
      EXPECT_NE(message.find(text), std::string::npos) << "expected '" << text << "' in: " << message;
      return;
    }
    ADD_FAILURE() << "ops::adafactor_sums accepted " << text;
  };
  const std::vector<ElementRun> fits{{0, 6, 4}, {4, 12, 4}};
  adafactor_sums(value, grad, fits, two_groups, 1e-30, none, none, squares);
  refused(std::vector<ElementRun>{{0, 6, 4}, {8, 12, 3}}, two_groups, squares, "run 1 (owned elements [8, 11)");
  refused(std::vector<ElementRun>{{0, 6, 4}, {4, 13, 4}}, two_groups, squares,
          "run 1 (owned elements [4, 8), tensor elements [13, 17))");
  refused(std::vector<ElementRun>{{0, -1, 2}}, two_groups, squares,
          "run 0 (owned elements [0, 2), tensor elements [-1, 1))");
  refused(fits, two_groups, std::span<double>(squares).first(1), "weight_squares has 1 entries, expected 2");
  refused(fits, AdafactorLayout{1, 4, 4, 2, 8}, squares, "neither factored");
}

TEST(OpsLinear, BackwardGivesTheBitsOfItsTwoHalves) {
  for (const OpCase& c : op_cases()) {
    if (c.op != "linear_backward") continue;
    for (bool with_optional : {true, false}) {
      SCOPED_TRACE(with_optional ? "dx and db given" : "dx and db undefined");
      MemoryAccountant accountant;
      const Args whole = bind(c, with_optional, accountant);
      const Args halves = bind(c, with_optional, accountant);
      linear_backward(whole["dx"], whole["dw"], whole["db"], whole["dy"], whole["x"], whole["w"]);
      if (halves["dx"].defined()) linear_backward_input(halves["dx"], halves["dy"], halves["w"]);
      linear_backward_weight(halves["dw"], halves["db"], halves["dy"], halves["x"]);
      for (const auto& [name, tensor] : whole.tensors()) {
        EXPECT_TRUE(same_bits(tensor, halves[name])) << name << " differs between the whole and the halves";
      }
    }
    return;
  }
  FAIL() << "no linear_backward case in the table";
}

TEST(OpsDispatch, CallsTheCpuBackendOfEachFloatingDtypeAndReturnsItsResult) {
  // The backend's element type as a number: 1 float, 2 bf16, 3 f16.
  auto probe = []<class T>(Cpu<T>) {
    static_assert(std::is_same_v<compute_t<T>, float>);
    if constexpr (std::is_same_v<T, float>) return 1.5;
    if constexpr (std::is_same_v<T, bf16>) return 2.5;
    if constexpr (std::is_same_v<T, f16>) return 3.5;
  };
  EXPECT_EQ(dispatch("ops::probe", Device::CPU, DType::F32, probe), 1.5);
  EXPECT_EQ(dispatch("ops::probe", Device::CPU, DType::BF16, probe), 2.5);
  EXPECT_EQ(dispatch("ops::probe", Device::CPU, DType::F16, probe), 3.5);
}

TEST(OpsDispatch, RefusesEveryOtherDeviceAndDtypeNamingThem) {
  for (Device device : {Device::CPU, Device::CUDA}) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8}) {
      const bool floating = dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
      if (device == Device::CPU && floating) continue;
      const std::string expected =
          fmt::format("ops::probe: no kernel for {} tensors on {}", dtype_name(dtype), device_name(device));
      bool called = false;
      try {
        dispatch("ops::probe", device, dtype, [&]<class T>(Cpu<T>) { called = true; });
        ADD_FAILURE() << expected << " was not raised";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
      }
      EXPECT_FALSE(called);
    }
  }
}

TEST(OpsDispatch, F32OnlyCallsTheCpuBackendInF32AndRefusesEveryOtherPair) {
  EXPECT_EQ(dispatch_f32("ops::probe", Device::CPU, DType::F32, []<class T>(Cpu<T>) {
              static_assert(std::is_same_v<T, float>);
              return 1.5;
            }),
            1.5);
  for (Device device : {Device::CPU, Device::CUDA}) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8}) {
      if (device == Device::CPU && dtype == DType::F32) continue;
      const std::string expected =
          fmt::format("ops::probe: no kernel for {} tensors on {}", dtype_name(dtype), device_name(device));
      bool called = false;
      try {
        dispatch_f32("ops::probe", device, dtype, [&]<class T>(Cpu<T>) { called = true; });
        ADD_FAILURE() << expected << " was not raised";
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(expected, 0), 0u) << e.what();
      }
      EXPECT_FALSE(called);
    }
  }
}

}  // namespace
}  // namespace tessera::ops::testing
