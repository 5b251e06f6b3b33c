// The ops under test, one entry each. Shapes are small but break naive code: odd channel counts,
// leading dimensions [B, T] next to flat [N] ones, rows of per-row statistics in both forms.
#include "op_cases.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/copy.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/relu.h"
#include "kernels/cpu/swiglu.h"
#include "ops/ops.h"

namespace tessera::ops::testing {

void Args::set(const std::string& name, Tensor t) {
  for (auto& [n, tensor] : tensors_) {
    if (n == name) {
      tensor = std::move(t);
      return;
    }
  }
  tensors_.emplace_back(name, std::move(t));
}

const Tensor& Args::operator[](std::string_view name) const {
  for (const auto& [n, tensor] : tensors_) {
    if (n == name) return tensor;
  }
  throw std::logic_error("op case reads an argument it does not declare: " + std::string(name));
}

float* Args::f(std::string_view name) const {
  const Tensor& t = (*this)[name];
  return t.defined() ? t.data<float>() : nullptr;
}

const int32_t* Args::i(std::string_view name) const { return (*this)[name].data<int32_t>(); }

int Args::n(std::string_view letter) const {
  auto it = sizes_->find(letter);
  if (it == sizes_->end()) throw std::logic_error("op case reads a size it does not declare: " + std::string(letter));
  return static_cast<int>(it->second);
}

bool OpCase::has_optional() const {
  for (const ArgSpec& a : args) {
    if (a.optional) return true;
  }
  return false;
}

namespace {

ArgSpec arg(std::string name, std::vector<std::string> dims, double mean = 0.0, double stddev = 1.0) {
  return ArgSpec{std::move(name), std::move(dims), Fill::Normal, false, "", mean, stddev};
}
ArgSpec opt(std::string name, std::vector<std::string> dims) {
  ArgSpec a = arg(std::move(name), std::move(dims));
  a.optional = true;
  return a;
}
ArgSpec acc(std::string name, std::vector<std::string> dims, double mean = 0.0, double stddev = 1.0) {
  ArgSpec a = arg(std::move(name), std::move(dims), mean, stddev);
  a.accumulator = true;
  return a;
}
ArgSpec opt_acc(std::string name, std::vector<std::string> dims) {
  ArgSpec a = acc(std::move(name), std::move(dims));
  a.optional = true;
  return a;
}
ArgSpec ints(std::string name, std::vector<std::string> dims, Fill fill) {
  ArgSpec a = arg(std::move(name), std::move(dims));
  a.fill = fill;
  return a;
}
ArgSpec alias_of(std::string name, const ArgSpec& target) {
  ArgSpec a = target;
  a.name = std::move(name);
  a.alias = target.name;
  return a;
}

OpCase entry(std::string op, Sizes sizes, std::vector<ArgSpec> args, Run via_ops, Run via_kernel,
             std::set<std::string> free_dims = {}) {
  return OpCase{std::move(op),        "", std::move(sizes), std::move(args), std::move(free_dims), std::move(via_ops),
                std::move(via_kernel)};
}

// Lets a case's lambdas return void (most ops) or the double the loss ops return.
template <class F>
Run run(F f) {
  return [f](const Args& a) -> double {
    if constexpr (std::is_void_v<std::invoke_result_t<F, const Args&>>) {
      f(a);
      return 0.0;
    } else {
      return f(a);
    }
  };
}

constexpr float kEps = 1e-5f;
constexpr float kTheta = 10000.0f;
constexpr int kPast = 3;       // attention_decode: positions already in the cache
constexpr int kPosition0 = 5;  // rope: the first token's position (decoding places tokens after a cache)
constexpr float kDropout = 0.25f;
constexpr uint64_t kSeed = 7, kStream = 11, kOffset = 100;
constexpr float kGradScale = 1.0f / 6.0f;
constexpr int64_t kEmbeddingVocab = 11;  // the embedding cases' V: the table holds the whole vocabulary

int rows(const Args& a) { return a.n("B") * a.n("T"); }
size_t numel(const Args& a, std::string_view name) { return static_cast<size_t>(a[name].numel()); }

}  // namespace

std::vector<OpCase> op_cases() {
  const Sizes linear{{"B", 2}, {"T", 3}, {"N", 6}, {"IC", 13}, {"OC", 7}};
  const Sizes norm{{"B", 2}, {"T", 3}, {"N", 6}, {"C", 13}};
  const Sizes elementwise{{"N", 5}, {"F", 37}};
  // Grouped-query shapes (Hkv < H): W3 = C + 2·Hkv·D. Multi-head attention is the kernels' tests'.
  const Sizes attention{{"B", 2}, {"T", 5}, {"C", 16}, {"W3", 32}, {"H", 4}, {"Hkv", 2}};
  const Sizes rope{{"B", 2}, {"T", 5}, {"C", 16}, {"W3", 32}, {"H", 2}, {"Hkv", 1}};
  // Decoding: T new tokens after kPast cached ones, in a cache of S positions.
  const Sizes decode{{"B", 2}, {"T", 4}, {"S", 9}, {"C", 16}, {"Ckv", 8}, {"W3", 32}, {"H", 4}, {"Hkv", 2}};
  const Sizes embedding{{"B", 2}, {"T", 3}, {"C", 12}, {"V", 11}, {"maxT", 5}};
  const Sizes loss{{"B", 2}, {"T", 3}, {"N", 6}, {"V", 11}};
  const Sizes residual{{"B", 2}, {"T", 3}, {"C", 13}};
  // One entry per op, its two runs on lines of their own (clang-format would pack them).
  // clang-format off
  return {
      entry("linear_forward", linear,
            {arg("y", {"B", "T", "OC"}), arg("x", {"B", "T", "IC"}), arg("w", {"OC", "IC"}, 0.0, 0.3),
             opt("b", {"OC"})},
            run([](const Args& a) { linear_forward(a["y"], a["x"], a["w"], a["b"]); }),
            run([](const Args& a) {
              kernels::linear_forward(a.f("y"), a.f("x"), a.f("w"), a.f("b"), rows(a), a.n("IC"), a.n("OC"));
            })),
      entry("linear_backward_input", linear,
            {arg("dx", {"B", "T", "IC"}), arg("dy", {"B", "T", "OC"}), arg("w", {"OC", "IC"}, 0.0, 0.3)},
            run([](const Args& a) { linear_backward_input(a["dx"], a["dy"], a["w"]); }),
            run([](const Args& a) {
              kernels::linear_backward<float>(a.f("dx"), nullptr, nullptr, a.f("dy"), nullptr, a.f("w"), rows(a),
                                              a.n("IC"), a.n("OC"));
            })),
      entry("linear_backward_weight", linear,
            {acc("dw", {"OC", "IC"}), opt_acc("db", {"OC"}), arg("dy", {"B", "T", "OC"}), arg("x", {"B", "T", "IC"})},
            run([](const Args& a) { linear_backward_weight(a["dw"], a["db"], a["dy"], a["x"]); }),
            run([](const Args& a) {
              kernels::linear_backward<float>(nullptr, a.f("dw"), a.f("db"), a.f("dy"), a.f("x"), nullptr, rows(a),
                                              a.n("IC"), a.n("OC"));
            })),
      entry("linear_backward", linear,
            {opt("dx", {"N", "IC"}), acc("dw", {"OC", "IC"}), opt_acc("db", {"OC"}), arg("dy", {"N", "OC"}),
             arg("x", {"N", "IC"}), arg("w", {"OC", "IC"}, 0.0, 0.3)},
            run([](const Args& a) { linear_backward(a["dx"], a["dw"], a["db"], a["dy"], a["x"], a["w"]); }),
            run([](const Args& a) {
              kernels::linear_backward(a.f("dx"), a.f("dw"), a.f("db"), a.f("dy"), a.f("x"), a.f("w"), a.n("N"),
                                       a.n("IC"), a.n("OC"));
            })),
      entry("layernorm_forward", norm,
            {arg("y", {"B", "T", "C"}), acc("mean", {"N"}), acc("rstd", {"N"}), arg("x", {"B", "T", "C"}, 0.5, 2.0),
             arg("w", {"C"}, 1.0, 0.2), opt("b", {"C"})},
            run([](const Args& a) { layernorm_forward(a["y"], a["mean"], a["rstd"], a["x"], a["w"], a["b"], kEps); }),
            run([](const Args& a) {
              kernels::layernorm_forward(a.f("y"), a.f("mean"), a.f("rstd"), a.f("x"), a.f("w"), a.f("b"), a.n("N"),
                                         a.n("C"), kEps);
            })),
      entry("layernorm_backward", norm,
            {opt("dx", {"B", "T", "C"}), acc("dw", {"C"}), opt_acc("db", {"C"}), arg("dy", {"B", "T", "C"}),
             arg("x", {"B", "T", "C"}), arg("w", {"C"}, 1.0, 0.2), acc("mean", {"B", "T"}),
             acc("rstd", {"B", "T"}, 1.0, 0.1)},
            run([](const Args& a) {
              layernorm_backward(a["dx"], a["dw"], a["db"], a["dy"], a["x"], a["w"], a["mean"], a["rstd"]);
            }),
            run([](const Args& a) {
              kernels::layernorm_backward(a.f("dx"), a.f("dw"), a.f("db"), a.f("dy"), a.f("x"), a.f("w"), a.f("mean"),
                                          a.f("rstd"), a.n("N"), a.n("C"));
            })),
      entry("rmsnorm_forward", norm,
            {arg("y", {"B", "T", "C"}), acc("rstd", {"N"}), arg("x", {"B", "T", "C"}), arg("w", {"C"}, 1.0, 0.2)},
            run([](const Args& a) { rmsnorm_forward(a["y"], a["rstd"], a["x"], a["w"], kEps); }),
            run([](const Args& a) {
              kernels::rmsnorm_forward(a.f("y"), a.f("rstd"), a.f("x"), a.f("w"), a.n("N"), a.n("C"), kEps);
            })),
      entry("rmsnorm_backward", norm,
            {opt("dx", {"B", "T", "C"}), acc("dw", {"C"}), arg("dy", {"B", "T", "C"}), arg("x", {"B", "T", "C"}),
             arg("w", {"C"}, 1.0, 0.2), acc("rstd", {"B", "T"}, 1.0, 0.1)},
            run([](const Args& a) { rmsnorm_backward(a["dx"], a["dw"], a["dy"], a["x"], a["w"], a["rstd"]); }),
            run([](const Args& a) {
              kernels::rmsnorm_backward(a.f("dx"), a.f("dw"), a.f("dy"), a.f("x"), a.f("w"), a.f("rstd"), a.n("N"),
                                        a.n("C"));
            })),
      entry("gelu_forward", elementwise, {arg("y", {"N", "F"}), arg("x", {"N", "F"})},
            run([](const Args& a) { gelu_forward(a["y"], a["x"]); }),
            run([](const Args& a) { kernels::gelu_forward(a.f("y"), a.f("x"), numel(a, "x")); })),
      entry("gelu_backward", elementwise, {arg("dx", {"N", "F"}), arg("x", {"N", "F"}), arg("dy", {"N", "F"})},
            run([](const Args& a) { gelu_backward(a["dx"], a["x"], a["dy"]); }),
            run([](const Args& a) { kernels::gelu_backward(a.f("dx"), a.f("x"), a.f("dy"), numel(a, "x")); })),
      entry("relu_forward", elementwise, {arg("y", {"N", "F"}), arg("x", {"N", "F"})},
            run([](const Args& a) { relu_forward(a["y"], a["x"]); }),
            run([](const Args& a) { kernels::relu_forward(a.f("y"), a.f("x"), numel(a, "x")); })),
      entry("relu_backward", elementwise, {arg("dx", {"N", "F"}), arg("x", {"N", "F"}), arg("dy", {"N", "F"})},
            run([](const Args& a) { relu_backward(a["dx"], a["x"], a["dy"]); }),
            run([](const Args& a) { kernels::relu_backward(a.f("dx"), a.f("x"), a.f("dy"), numel(a, "x")); })),
      entry("relu2_forward", elementwise, {arg("y", {"N", "F"}), arg("x", {"N", "F"})},
            run([](const Args& a) { relu2_forward(a["y"], a["x"]); }),
            run([](const Args& a) { kernels::relu2_forward(a.f("y"), a.f("x"), numel(a, "x")); })),
      entry("relu2_backward", elementwise, {arg("dx", {"N", "F"}), arg("x", {"N", "F"}), arg("dy", {"N", "F"})},
            run([](const Args& a) { relu2_backward(a["dx"], a["x"], a["dy"]); }),
            run([](const Args& a) { kernels::relu2_backward(a.f("dx"), a.f("x"), a.f("dy"), numel(a, "x")); })),
      entry("swiglu_forward", elementwise, {arg("y", {"N", "F"}), arg("gate", {"N", "F"}), arg("up", {"N", "F"})},
            run([](const Args& a) { swiglu_forward(a["y"], a["gate"], a["up"]); }),
            run([](const Args& a) { kernels::swiglu_forward(a.f("y"), a.f("gate"), a.f("up"), numel(a, "gate")); })),
      entry("swiglu_backward", elementwise,
            {arg("dgate", {"N", "F"}), arg("dup", {"N", "F"}), arg("dy", {"N", "F"}), arg("gate", {"N", "F"}),
             arg("up", {"N", "F"})},
            run([](const Args& a) { swiglu_backward(a["dgate"], a["dup"], a["dy"], a["gate"], a["up"]); }),
            run([](const Args& a) {
              kernels::swiglu_backward(a.f("dgate"), a.f("dup"), a.f("dy"), a.f("gate"), a.f("up"), numel(a, "gate"));
            })),
      entry("attention_forward", attention,
            {arg("out", {"B", "T", "C"}), acc("lse", {"B", "H", "T"}), arg("qkv", {"B", "T", "W3"})},
            run([](const Args& a) { attention_forward(a["out"], a["lse"], a["qkv"], a.n("H"), a.n("Hkv")); }),
            run([](const Args& a) {
              kernels::attention_forward(a.f("out"), a.f("lse"), a.f("qkv"), a.n("B"), a.n("T"), a.n("C"), a.n("H"),
                                         a.n("Hkv"));
            })),
      entry("attention_backward", attention,
            {arg("dqkv", {"B", "T", "W3"}), arg("dout", {"B", "T", "C"}), arg("qkv", {"B", "T", "W3"}),
             arg("out", {"B", "T", "C"}), acc("lse", {"B", "H", "T"}, 1.0, 0.5)},
            run([](const Args& a) {
              attention_backward(a["dqkv"], a["dout"], a["qkv"], a["out"], a["lse"], a.n("H"), a.n("Hkv"));
            }),
            run([](const Args& a) {
              kernels::attention_backward(a.f("dqkv"), a.f("dout"), a.f("qkv"), a.f("out"), a.f("lse"), a.n("B"),
                                          a.n("T"), a.n("C"), a.n("H"), a.n("Hkv"));
            })),
      entry("attention_decode", decode,
            {arg("out", {"B", "T", "C"}), arg("k_cache", {"B", "S", "Ckv"}), arg("v_cache", {"B", "S", "Ckv"}),
             arg("qkv", {"B", "T", "W3"})},
            run([](const Args& a) {
              attention_decode(a["out"], a["k_cache"], a["v_cache"], a["qkv"], kPast, a.n("H"), a.n("Hkv"));
            }),
            run([](const Args& a) {
              kernels::attention_decode(a.f("out"), a.f("k_cache"), a.f("v_cache"), a.f("qkv"), a.n("B"), a.n("T"),
                                        kPast, a.n("S"), a.n("C"), a.n("H"), a.n("Hkv"));
            })),
      entry("rope_forward", rope, {arg("y", {"B", "T", "W3"}), arg("x", {"B", "T", "W3"})},
            run([](const Args& a) { rope_forward(a["y"], a["x"], a.n("H"), a.n("Hkv"), kTheta, kPosition0); }),
            run([](const Args& a) {
              kernels::rope_forward(a.f("y"), a.f("x"), a.n("B"), a.n("T"), a.n("C"), a.n("H"), a.n("Hkv"), kTheta,
                                    kPosition0);
            })),
      entry("rope_backward", rope, {arg("dx", {"B", "T", "W3"}), arg("dy", {"B", "T", "W3"})},
            run([](const Args& a) { rope_backward(a["dx"], a["dy"], a.n("H"), a.n("Hkv"), kTheta, kPosition0); }),
            run([](const Args& a) {
              kernels::rope_backward(a.f("dx"), a.f("dy"), a.n("B"), a.n("T"), a.n("C"), a.n("H"), a.n("Hkv"), kTheta,
                                     kPosition0);
            })),
      entry("embedding_forward", embedding,
            {arg("y", {"B", "T", "C"}), ints("tokens", {"B", "T"}, Fill::Tokens), arg("wte", {"V", "C"}),
             opt("wpe", {"maxT", "C"})},
            run([](const Args& a) { embedding_forward(a["y"], a["tokens"], a["wte"], a["wpe"]); }),
            run([](const Args& a) {
              kernels::embedding_forward(a.f("y"), a.i("tokens"), a.f("wte"), a.f("wpe"), a.n("B"), a.n("T"), a.n("C"),
                                         a.n("V"));
            }),
            {"V", "maxT"}),
      entry("embedding_backward", embedding,
            {acc("dwte", {"V", "C"}), opt_acc("dwpe", {"maxT", "C"}), arg("dy", {"B", "T", "C"}),
             ints("tokens", {"B", "T"}, Fill::Tokens)},
            run([](const Args& a) { embedding_backward(a["dwte"], a["dwpe"], a["dy"], a["tokens"]); }),
            run([](const Args& a) {
              kernels::embedding_backward(a.f("dwte"), a.f("dwpe"), a.f("dy"), a.i("tokens"), a.n("B"), a.n("T"),
                                          a.n("C"));
            }),
            {"V", "maxT"}),
      entry("cross_entropy_forward_backward", loss,
            {arg("logits_inout", {"B", "T", "V"}, 0.0, 2.0), acc("losses", {"B", "T"}),
             ints("targets", {"B", "T"}, Fill::Targets)},
            run([](const Args& a) {
              return cross_entropy_forward_backward(a["logits_inout"], a["losses"], a["targets"], kIgnoreIndex,
                                                    kGradScale);
            }),
            run([](const Args& a) {
              return kernels::cross_entropy_forward_backward(a.f("logits_inout"), a.f("losses"), a.i("targets"),
                                                             rows(a), a.n("V"), kIgnoreIndex, kGradScale);
            }),
            {"V"}),
      entry("cross_entropy_forward", loss,
            {acc("losses", {"N"}), arg("logits", {"B", "T", "V"}, 0.0, 2.0), ints("targets", {"N"}, Fill::Targets)},
            run([](const Args& a) {
              return cross_entropy_forward(a["losses"], a["logits"], a["targets"], kIgnoreIndex, a.count());
            }),
            run([](const Args& a) {
              return kernels::cross_entropy_forward(a.f("losses"), a.f("logits"), a.i("targets"), a.n("N"), a.n("V"),
                                                    kIgnoreIndex, a.count());
            }),
            {"V"}),
      entry("vocab_parallel_cross_entropy", loss,
            {arg("logits_inout", {"B", "T", "V"}, 0.0, 2.0), acc("losses", {"B", "T"}),
             ints("targets", {"B", "T"}, Fill::Targets)},
            run([](const Args& a) {
              const int64_t V = a["logits_inout"].shape().empty() ? 1 : a["logits_inout"].shape().back();
              return vocab_parallel_cross_entropy(a["logits_inout"], a["losses"], a["targets"], kIgnoreIndex,
                                                  kGradScale, {0, V, V}, {});
            }),
            run([](const Args& a) {
              return kernels::vocab_parallel_cross_entropy(a.f("logits_inout"), a.f("losses"), a.i("targets"), rows(a),
                                                           a.n("V"), a.n("V"), 0, a.n("V"), kIgnoreIndex, kGradScale,
                                                           {}, {});
            }),
            {"V"}),
      entry("embedding_rows_forward", embedding,
            {arg("y", {"B", "T", "C"}), ints("tokens", {"B", "T"}, Fill::Tokens), arg("table", {"V", "C"})},
            run([](const Args& a) { embedding_rows_forward(a["y"], a["tokens"], a["table"], 0, kEmbeddingVocab); }),
            run([](const Args& a) {
              kernels::embedding_rows_forward(a.f("y"), a.i("tokens"), a.f("table"), a.n("B"), a.n("T"), a.n("C"), 0,
                                              a.n("V"));
            }),
            {"V"}),
      entry("embedding_rows_backward", embedding,
            {acc("dtable", {"V", "C"}), arg("dy", {"B", "T", "C"}), ints("tokens", {"B", "T"}, Fill::Tokens)},
            run([](const Args& a) { embedding_rows_backward(a["dtable"], a["dy"], a["tokens"], 0); }),
            run([](const Args& a) {
              kernels::embedding_rows_backward(a.f("dtable"), a.f("dy"), a.i("tokens"), a.n("B"), a.n("T"), a.n("C"),
                                               0, a.n("V"));
            }),
            {"V"}),
      entry("positions_forward", embedding, {arg("y", {"B", "T", "C"}), arg("wpe", {"maxT", "C"})},
            run([](const Args& a) { positions_forward(a["y"], a["wpe"]); }),
            run([](const Args& a) { kernels::positions_forward(a.f("y"), a.f("wpe"), a.n("B"), a.n("T"), a.n("C")); }),
            {"maxT", "B", "T"}),
      entry("positions_backward", embedding, {acc("dwpe", {"maxT", "C"}), arg("dy", {"B", "T", "C"})},
            run([](const Args& a) { positions_backward(a["dwpe"], a["dy"]); }),
            run([](const Args& a) {
              kernels::positions_backward(a.f("dwpe"), a.f("dy"), a.n("B"), a.n("T"), a.n("C"));
            }),
            {"maxT", "B", "T"}),
      entry("add_bias", residual, {arg("y", {"B", "T", "C"}), arg("b", {"C"})},
            run([](const Args& a) { add_bias(a["y"], a["b"]); }),
            run([](const Args& a) {
              kernels::add_bias(a.f("y"), a.f("b"), static_cast<size_t>(rows(a)), static_cast<size_t>(a.n("C")));
            }),
            {"B", "T"}),
      entry("add_bias_backward", residual, {acc("db", {"C"}), arg("dy", {"B", "T", "C"})},
            run([](const Args& a) { add_bias_backward(a["db"], a["dy"]); }),
            run([](const Args& a) {
              kernels::add_bias_backward(a.f("db"), a.f("dy"), static_cast<size_t>(rows(a)),
                                         static_cast<size_t>(a.n("C")));
            }),
            {"B", "T"}),
      entry("add_inplace", residual, {arg("y", {"B", "T", "C"}), arg("x", {"B", "T", "C"})},
            run([](const Args& a) { add_inplace(a["y"], a["x"]); }),
            run([](const Args& a) { kernels::add_inplace(a.f("y"), a.f("x"), numel(a, "y")); })),
      entry("scale", residual, {arg("y", {"B", "T", "C"}), arg("x", {"B", "T", "C"})},
            run([](const Args& a) { scale(a["y"], a["x"], 0.375f); }),
            run([](const Args& a) {
              std::copy_n(a.f("x"), numel(a, "x"), a.f("y"));
              kernels::scale_inplace(a.f("y"), 0.375f, numel(a, "y"));
            })),
      entry("copy", elementwise, {arg("dst", {"N", "F"}), arg("src", {"N", "F"})},
            run([](const Args& a) { copy(a["dst"], a["src"]); }),
            run([](const Args& a) { kernels::copy(a.f("dst"), a.f("src"), numel(a, "src")); })),
      entry("widen", residual, {acc("out", {"B", "T", "C"}), arg("x", {"B", "T", "C"})},
            run([](const Args& a) { widen(a["out"], a["x"]); }),
            run([](const Args& a) { kernels::widen<float>(a.f("out"), a.f("x"), numel(a, "x")); })),
      entry("narrow", residual, {arg("out", {"B", "T", "C"}), acc("x", {"B", "T", "C"})},
            run([](const Args& a) { narrow(a["out"], a["x"]); }),
            run([](const Args& a) { kernels::narrow<float>(a.f("out"), a.f("x"), numel(a, "x")); })),
      entry("dropout_forward", residual, {arg("y", {"B", "T", "C"}), arg("x", {"B", "T", "C"})},
            run([](const Args& a) { dropout_forward(a["y"], a["x"], kDropout, kSeed, kStream, kOffset); }),
            run([](const Args& a) {
              kernels::dropout_forward(a.f("y"), a.f("x"), numel(a, "x"), kDropout, kSeed, kStream, kOffset);
            })),
      entry("dropout_backward", residual, {arg("dx", {"B", "T", "C"}), arg("dy", {"B", "T", "C"})},
            run([](const Args& a) { dropout_backward(a["dx"], a["dy"], kDropout, kSeed, kStream, kOffset); }),
            run([](const Args& a) {
              kernels::dropout_backward(a.f("dx"), a.f("dy"), numel(a, "dy"), kDropout, kSeed, kStream, kOffset);
            })),
  };
  // clang-format on
}

std::vector<OpCase> in_place_cases() {
  // The output argument (listed first) becomes the input's tensor: the ops that document aliasing.
  std::vector<OpCase> cases;
  for (OpCase c : op_cases()) {
    if (c.op != "dropout_forward" && c.op != "dropout_backward" && c.op != "rope_forward" && c.op != "rope_backward") {
      continue;
    }
    c.variant = "in_place";
    c.args[0] = alias_of(c.args[0].name, c.args[1]);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace tessera::ops::testing
