// Every op of the table (op_cases.cpp) is checked the same way:
//   - through ops:: and through its CPU kernel on the same random data, bitwise equal outputs
//     (with its optional arguments given and left out);
//   - each argument in turn with a wrong shape (every dimension one larger, unless the op leaves
//     that size free, and one dimension too many), a wrong dtype, a non-contiguous view, or
//     missing, is refused with a message that names the op and the argument;
//   - all floating arguments in bf16 are refused with "no kernel for bf16 tensors on cpu".
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

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

DType dtype_of(const ArgSpec& a) { return a.fill == Fill::Normal ? DType::F32 : DType::I32; }

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
    EXPECT_TRUE(wrote) << "ops::" << c.op << " changed no tensor";
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

  MemoryAccountant accountant_;
};

TEST_P(OpTest, MatchesTheKernelBitwise) { expect_matches_kernel(op_case()); }

TEST_P(OpTest, RefusesAWrongShapeOfEachArgument) {
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

TEST_P(OpTest, RefusesBf16WithNoKernel) {
  const OpCase& c = op_case();
  Args args = bind(c, true, accountant_);
  for (const ArgSpec& a : c.args) {
    if (a.fill == Fill::Normal)
      args.set(a.name, Tensor::zeros(shape_of(c, a), DType::BF16, MemoryTag::Workspace, accountant_));
  }
  expect_refused(args, "", "ops::" + c.op + ": no kernel for bf16 tensors on cpu");
}

TEST_P(OpTest, RefusesAWrongDtypeOfEachArgument) {
  const OpCase& c = op_case();
  for (const ArgSpec& a : c.args) {
    // A float argument among f32 ones in bf16; an index argument in f32.
    const DType wrong = a.fill == Fill::Normal ? DType::BF16 : DType::F32;
    SCOPED_TRACE(a.name + " in " + std::string(dtype_name(wrong)));
    Args args = bind(c, true, accountant_);
    args.set(a.name, Tensor::zeros(shape_of(c, a), wrong, MemoryTag::Workspace, accountant_));
    expect_refused(args, a.name, "dtype");
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

TEST_P(OpTest, RefusesEachRequiredArgumentMissing) {
  const OpCase& c = op_case();
  for (const ArgSpec& a : c.args) {
    if (a.optional) continue;
    SCOPED_TRACE(a.name + " undefined");
    Args args = bind(c, true, accountant_);
    args.set(a.name, Tensor());
    expect_refused(args, a.name, "undefined");
  }
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.test_name(); }

INSTANTIATE_TEST_SUITE_P(Ops, OpTest, ::testing::ValuesIn(op_cases()), case_name);

// The ops that document aliasing, run in place, against their kernels run in place.
class OpInPlaceTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpInPlaceTest, MatchesTheKernelBitwise) { expect_matches_kernel(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, OpInPlaceTest, ::testing::ValuesIn(in_place_cases()), case_name);

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

TEST(OpsDispatch, CallsTheCpuFloatBackendAndReturnsItsResult) {
  const double result = dispatch("ops::probe", Device::CPU, DType::F32, []<class T>(Cpu<T>) {
    static_assert(std::is_same_v<T, float>);
    return 2.5;
  });
  EXPECT_EQ(result, 2.5);
}

TEST(OpsDispatch, RefusesEveryOtherDeviceAndDtypeNamingThem) {
  for (Device device : {Device::CPU, Device::CUDA}) {
    for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I8, DType::U8}) {
      if (device == Device::CPU && dtype == DType::F32) continue;
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

}  // namespace
}  // namespace tessera::ops::testing
