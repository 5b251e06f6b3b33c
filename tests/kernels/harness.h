#pragma once
// One harness checks every op the same way: make random inputs, run forward, run backward with a
// random upstream gradient, and compare
//   - the analytic gradients with central finite differences of L = Σ out · dout (double),
//   - the float instantiation with the double one (forward and backward),
//   - the forward with a plain-loop reference, where the op has one,
//   - the contract: activation gradients are written (=), parameter gradients accumulate (+=).
// An op is a struct with templated forward/backward (see op_cases.cpp); Case<Op> adapts it.
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace tessera::kernels::testing {

template <class T>
using Buffers = std::vector<std::vector<T>>;

enum class Grad { Written, Accumulated };

struct Input {
  std::string name;
  size_t size = 0;
  Grad grad = Grad::Written;
  double mean = 0.0;  // inputs are normal(mean, stddev)
  double stddev = 1.0;
};

class OpCase {
 public:
  virtual ~OpCase() = default;
  virtual std::string name() const = 0;
  virtual std::vector<Input> inputs() const = 0;
  virtual size_t output_size() const = 0;
  // The backward takes one scalar upstream gradient for all outputs (fused loss kernels).
  virtual bool scalar_upstream() const { return false; }
  virtual bool has_reference() const { return false; }

  virtual void forward(const Buffers<double>& in, std::vector<double>& out, Buffers<double>& saved) const = 0;
  virtual void forward(const Buffers<float>& in, std::vector<float>& out, Buffers<float>& saved) const = 0;
  virtual void backward(const Buffers<double>& in, const std::vector<double>& out, const std::vector<double>& dout,
                        const Buffers<double>& saved, Buffers<double>& din) const = 0;
  virtual void backward(const Buffers<float>& in, const std::vector<float>& out, const std::vector<float>& dout,
                        const Buffers<float>& saved, Buffers<float>& din) const = 0;
  // A straightforward loop implementation of the forward, in double.
  virtual void reference(const Buffers<double>& in, std::vector<double>& out) const {}
};

template <class Op>
class Case final : public OpCase {
 public:
  Case(std::string name, Op op) : name_(std::move(name)), op_(std::move(op)) {}
  std::string name() const override { return name_; }
  std::vector<Input> inputs() const override { return op_.inputs(); }
  size_t output_size() const override { return op_.output_size(); }
  bool scalar_upstream() const override { return Op::kScalarUpstream; }
  bool has_reference() const override { return Op::kHasReference; }
  void forward(const Buffers<double>& in, std::vector<double>& out, Buffers<double>& saved) const override {
    op_.forward(in, out, saved);
  }
  void forward(const Buffers<float>& in, std::vector<float>& out, Buffers<float>& saved) const override {
    op_.forward(in, out, saved);
  }
  void backward(const Buffers<double>& in, const std::vector<double>& out, const std::vector<double>& dout,
                const Buffers<double>& saved, Buffers<double>& din) const override {
    op_.backward(in, out, dout, saved, din);
  }
  void backward(const Buffers<float>& in, const std::vector<float>& out, const std::vector<float>& dout,
                const Buffers<float>& saved, Buffers<float>& din) const override {
    op_.backward(in, out, dout, saved, din);
  }
  void reference(const Buffers<double>& in, std::vector<double>& out) const override {
    if constexpr (Op::kHasReference) op_.reference(in, out);
  }

 private:
  std::string name_;
  Op op_;
};

// gtest prints a failing case by its name.
inline void PrintTo(const std::shared_ptr<const OpCase>& op, std::ostream* os) { *os << op->name(); }

template <class Op>
std::shared_ptr<const OpCase> make_case(std::string name, Op op) {
  return std::make_shared<Case<Op>>(std::move(name), std::move(op));
}

// The registered cases: elementwise, normalization, linear, loss and embedding ops
// (op_cases.cpp), attention and rotary embedding (op_cases_attention.cpp), and all of them.
std::vector<std::shared_ptr<const OpCase>> dense_cases();
std::vector<std::shared_ptr<const OpCase>> attention_cases();
// The mixture-of-experts router: gates with the capacity's drops, the load-balancing and z losses (op_cases_moe.cpp).
std::vector<std::shared_ptr<const OpCase>> moe_cases();
std::vector<std::shared_ptr<const OpCase>> all_cases();

// Deterministic test data from the project's counter-based RNG.
std::vector<double> random_normal(size_t n, uint64_t seed, const std::string& stream, double mean = 0.0,
                                  double stddev = 1.0);
std::vector<int32_t> random_ints(size_t n, uint64_t seed, const std::string& stream, int32_t lo, int32_t hi);

template <class To, class From>
std::vector<To> cast(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// ||a - b|| / ||b||, or ||a - b|| when b is zero.
double relative_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace tessera::kernels::testing
