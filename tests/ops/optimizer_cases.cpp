// The optimizer updates under test (ops/optimizer_update.h), one entry each: 1-D f32 runs of
// master values, gradients and state whose length no vector width divides, and each op's
// optional momentum buffer given and left out. Second moments are drawn positive, as they are.
// Adafactor's passes run over a factored stack and a vector tensor whose owned elements lie in
// runs with gaps between them.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/adafactor.h"
#include "kernels/cpu/adam8bit.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/lamb.h"
#include "kernels/cpu/lars.h"
#include "kernels/cpu/one_bit_adam.h"
#include "kernels/cpu/sgd.h"
#include "kernels/cpu/sign_compression.h"
#include "op_cases.h"
#include "ops/ops.h"

namespace tessera::ops::testing {

namespace {

ArgSpec run_arg(std::string name, double mean = 0.0, double stddev = 1.0) {
  return ArgSpec{std::move(name), {"N"}, Fill::Normal, false, "", mean, stddev};
}
ArgSpec optional_run_arg(std::string name) {
  ArgSpec a = run_arg(std::move(name));
  a.optional = true;
  return a;
}
ArgSpec second_moment() { return run_arg("v", 2.0, 0.5); }

ArgSpec codes_arg(std::string name) {
  ArgSpec a = run_arg(std::move(name));
  a.fill = Fill::Codes;
  return a;
}
ArgSpec codebook_arg(std::string name) { return ArgSpec{std::move(name), {"K"}, Fill::Codebook, false, ""}; }

// K: the entries of an 8-bit codebook, a size of its own (the ops take any up to 256).
OpCase optimizer_entry(std::string op, std::string variant, std::vector<ArgSpec> args, Run via_ops, Run via_kernel) {
  return OpCase{std::move(op), std::move(variant), Sizes{{"N", 1037}, {"K", 256}}, std::move(args),
                {"K"},         std::move(via_ops), std::move(via_kernel)};
}

// A sign-compressed message of N elements: N a multiple of 8, so that one element more needs a
// byte more; its last block is short.
OpCase message_entry(std::string op, std::vector<ArgSpec> args, Run via_ops, Run via_kernel) {
  constexpr int64_t N = 1032;
  return OpCase{std::move(op),
                "",
                Sizes{{"N", N},
                      {"K", 256},
                      {"bytes", static_cast<int64_t>(kernels::sign_bits_bytes(N))},
                      {"blocks", static_cast<int64_t>(kernels::sign_blocks(N))}},
                std::move(args),
                {},
                std::move(via_ops),
                std::move(via_kernel)};
}

ArgSpec bits_arg() { return ArgSpec{"bits", {"bytes"}, Fill::Codes, false, ""}; }
ArgSpec scales_arg() { return ArgSpec{"scales", {"blocks"}, Fill::Normal, false, "", 1.0, 0.2}; }

const uint8_t* codes_of(const Args& a, std::string_view name) { return a[name].data<uint8_t>(); }
size_t entries(const Args& a, std::string_view name) { return static_cast<size_t>(a[name].numel()); }

OpCase read_only(OpCase c) {
  c.writes = false;
  return c;
}

template <class F>
Run returning_nothing(F f) {
  return [f](const Args& a) -> double {
    f(a);
    return 0.0;
  };
}

size_t length(const Args& a) { return static_cast<size_t>(a.n("N")); }

constexpr AdamWStep kAdamW{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0};
constexpr AdamWStep kAdamWFrozen{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5, 2};
constexpr SgdStep kNesterov{0.05f, 0.9f, 0.01f, false, true};
constexpr SgdStep kDecoupled{0.05f, 0.8f, 0.01f, true, false};
constexpr LambStep kLamb{0.9f, 0.999f, 1e-6f, 0.01f, 4};
constexpr float kLambStepSize = 0.0125f;
constexpr float kMScale = 0.03f, kVScale = 0.002f, kAbsmax = 1.75f;
constexpr float kOneBitBeta1 = 0.9f, kRanks = 4.0f, kMessageWeight = 0.25f;
constexpr FrozenAdamStep kFrozenAdam{0.004f, 0.75f, 1e-8f, 0.999f};
constexpr float kLarsScale = 0.02f, kLarsDecay = 5e-4f, kLarsMomentum = 0.9f;

Run adamw_via_ops(AdamWStep k) {
  return returning_nothing([k](const Args& a) { adamw_update(a["value"], a["grad"], a["m"], a["v"], k); });
}
Run adamw_via_kernel(AdamWStep k) {
  return returning_nothing([k](const Args& a) {
    kernels::adamw_update(a.f("value"), a.f("grad"), a.f("m"), a.f("v"), length(a), k.lr, k.beta1, k.beta2, k.eps,
                          k.weight_decay, k.step, k.variance_frozen_at);
  });
}
Run sgd_via_ops(SgdStep k) {
  return returning_nothing([k](const Args& a) { sgd_update(a["value"], a["grad"], a["momentum_buffer"], k); });
}
Run sgd_via_kernel(SgdStep k) {
  return returning_nothing([k](const Args& a) {
    kernels::sgd_update(a.f("value"), a.f("grad"), a.f("momentum_buffer"), length(a), k.lr, k.momentum, k.weight_decay,
                        k.decoupled_weight_decay, k.nesterov);
  });
}

std::vector<ArgSpec> adam8bit_args() {
  return {run_arg("value"),
          run_arg("grad"),
          codes_arg("m_codes"),
          codes_arg("v_codes"),
          codebook_arg("signed_code"),
          codebook_arg("unsigned_code"),
          run_arg("new_m"),
          run_arg("new_v")};
}
enum class Largest { M, V };
Run adam8bit_via_ops(Largest which) {
  return [which](const Args& a) {
    const BlockMaxima b = adam8bit_block(a["value"], a["grad"], a["m_codes"], a["v_codes"], kMScale, kVScale,
                                         a["signed_code"], a["unsigned_code"], a["new_m"], a["new_v"], kAdamW);
    return double(which == Largest::M ? b.m : b.v);
  };
}
Run adam8bit_via_kernel(Largest which) {
  return [which](const Args& a) {
    const kernels::BlockMaxima b = kernels::adam8bit_block(
        a.f("value"), a.f("grad"), codes_of(a, "m_codes"), codes_of(a, "v_codes"), kMScale, kVScale,
        a.f("signed_code"), a.f("unsigned_code"), a.f("new_m"), a.f("new_v"), length(a), kAdamW.lr, kAdamW.beta1,
        kAdamW.beta2, kAdamW.eps, kAdamW.weight_decay, kAdamW.step);
    return double(which == Largest::M ? b.m : b.v);
  };
}

// Adafactor's passes place the N owned elements in a whole tensor by runs that skip some of it, as
// a tensor-parallel block's rows do: a factored stack of 2 matrices 31 × 23 owned 17 columns of a
// row at a time, and a vector tensor of 3 groups of 499 owned 100 elements of 140 at a time (the
// last runs short). The statistics tables (host doubles) start from values of their own, so that
// a pass that overwrote instead of adding would show, and come back folded into the result.
constexpr AdafactorLayout kFactored{2, 31, 23, 2, 31 * 23};
constexpr AdafactorLayout kVector{0, 0, 0, 3, 499};
constexpr float kOldWeight = 0.75f, kNewWeight = 0.25f, kAdafactorBeta1 = 0.9f;
constexpr double kEps1 = 1e-30;

std::vector<ElementRun> strided_runs(int64_t n, int64_t run, int64_t stride, int64_t first) {
  std::vector<ElementRun> runs;
  for (int64_t local = 0, global = first; local < n; local += run, global += stride) {
    runs.push_back({local, global, std::min(run, n - local)});
  }
  return runs;
}
std::vector<ElementRun> runs_of(const Args& a, const AdafactorLayout& layout) {
  return layout.factored() ? strided_runs(a.n("N"), 17, 23, 3) : strided_runs(a.n("N"), 100, 140, 7);
}

// `entries` positive doubles, different in each table (`seed`).
std::vector<double> table(int64_t entries, double seed) {
  std::vector<double> t(static_cast<size_t>(entries));
  for (size_t i = 0; i < t.size(); ++i) t[i] = seed + 0.37 * double(i % 11) + 1e-3 * double(i);
  return t;
}
std::vector<AdafactorGroupStep> group_steps(const AdafactorLayout& layout) {
  std::vector<AdafactorGroupStep> steps;
  for (int64_t g = 0; g < layout.groups; ++g) steps.push_back({1.0 + 0.5 * double(g), 1e-2 / double(g + 1), 0.999});
  return steps;
}

// The bits of the tables, folded (FNV-1a) into the double the tests compare bitwise.
double digest(std::initializer_list<std::span<const double>> tables) {
  uint64_t h = 1469598103934665603ull;
  for (std::span<const double> t : tables) {
    for (const double d : t) {
      const auto bits = std::bit_cast<uint64_t>(d);
      for (int b = 0; b < 64; b += 8) h = (h ^ ((bits >> b) & 0xffu)) * 1099511628211ull;
    }
  }
  return std::bit_cast<double>(h);
}

struct SumTables {
  std::vector<double> rows, cols, weights;
  explicit SumTables(const AdafactorLayout& layout)
      : rows(table(layout.matrices * layout.rows, 1.0)),
        cols(table(layout.matrices * layout.cols, 2.0)),
        weights(table(layout.groups, 3.0)) {}
  double folded() const { return digest({rows, cols, weights}); }
};

Run adafactor_sums_via_ops(AdafactorLayout layout) {
  return [layout](const Args& a) {
    SumTables t(layout);
    adafactor_sums(a["value"], a["grad"], runs_of(a, layout), layout, kEps1, t.rows, t.cols, t.weights);
    return t.folded();
  };
}
Run adafactor_sums_via_kernel(AdafactorLayout layout) {
  return [layout](const Args& a) {
    SumTables t(layout);
    const std::vector<ElementRun> runs = runs_of(a, layout);
    kernels::adafactor_sums(a.f("value"), a.f("grad"), runs.data(), runs.size(), layout, kEps1, t.rows.data(),
                            t.cols.data(), t.weights.data());
    return t.folded();
  };
}

// ΣR of each matrix: R's own sums, so that V̂ is near G²'s scale (zeros where a refusal test
// binds a row the op will refuse).
std::vector<double> row_totals(const Args& a) {
  std::vector<double> totals(static_cast<size_t>(kFactored.matrices), 0.0);
  const Tensor& row = a["row"];
  if (!row.defined() || row.dtype() != DType::F32 || row.numel() < kFactored.matrices * kFactored.rows) return totals;
  for (int64_t i = 0; i < kFactored.matrices * kFactored.rows; ++i) {
    totals[static_cast<size_t>(i / kFactored.rows)] += double(row.data<float>()[i]);
  }
  return totals;
}

kernels::AdafactorMoment factored_moment(const Args& a, const std::vector<double>& totals) {
  return {a.f("row"), a.f("col"), totals.data(), nullptr};
}
kernels::AdafactorMoment vector_moment(const Args& a) { return {nullptr, nullptr, nullptr, a.f("v")}; }

ArgSpec factor_arg(std::string name, std::string letter) {
  return ArgSpec{std::move(name), {std::move(letter)}, Fill::Normal, false, "", 2.0, 0.5};
}
OpCase adafactor_entry(std::string op, std::string variant, std::vector<ArgSpec> args, std::set<std::string> free_dims,
                       Run via_ops, Run via_kernel) {
  return OpCase{std::move(op),
                std::move(variant),
                Sizes{{"N", 1037},
                      {"R", kFactored.matrices * kFactored.rows},
                      {"C", kFactored.matrices * kFactored.cols}},
                std::move(args),
                std::move(free_dims),
                std::move(via_ops),
                std::move(via_kernel)};
}

}  // namespace

std::vector<OpCase> optimizer_cases() {
  const std::vector<ArgSpec> adam_args{run_arg("value"), run_arg("grad"), run_arg("m"), second_moment()};
  const std::vector<ArgSpec> sgd_args{run_arg("value"), run_arg("grad"), optional_run_arg("momentum_buffer")};
  return {
      optimizer_entry("adamw_update", "", adam_args, adamw_via_ops(kAdamW), adamw_via_kernel(kAdamW)),
      optimizer_entry("adamw_update", "frozen_variance", adam_args, adamw_via_ops(kAdamWFrozen),
                      adamw_via_kernel(kAdamWFrozen)),
      optimizer_entry("sgd_update", "", sgd_args, sgd_via_ops(kNesterov), sgd_via_kernel(kNesterov)),
      optimizer_entry("sgd_update", "decoupled", sgd_args, sgd_via_ops(kDecoupled), sgd_via_kernel(kDecoupled)),
      // The two sums come back as the run's result, one entry each.
      optimizer_entry(
          "lamb_moments", "weight_squares", adam_args,
          [](const Args& a) { return lamb_moments(a["value"], a["grad"], a["m"], a["v"], kLamb, true).first; },
          [](const Args& a) {
            return kernels::lamb_moments(a.f("value"), a.f("grad"), a.f("m"), a.f("v"), length(a), kLamb.beta1,
                                         kLamb.beta2, kLamb.eps, kLamb.weight_decay, kLamb.step, true)
                .weights;
          }),
      optimizer_entry(
          "lamb_moments", "direction_squares", adam_args,
          [](const Args& a) { return lamb_moments(a["value"], a["grad"], a["m"], a["v"], kLamb, true).second; },
          [](const Args& a) {
            return kernels::lamb_moments(a.f("value"), a.f("grad"), a.f("m"), a.f("v"), length(a), kLamb.beta1,
                                         kLamb.beta2, kLamb.eps, kLamb.weight_decay, kLamb.step, true)
                .directions;
          }),
      optimizer_entry(
          "lamb_apply", "", {run_arg("value"), run_arg("m"), second_moment()},
          returning_nothing([](const Args& a) { lamb_apply(a["value"], a["m"], a["v"], kLamb, kLambStepSize); }),
          returning_nothing([](const Args& a) {
            kernels::lamb_apply(a.f("value"), a.f("m"), a.f("v"), length(a), kLamb.beta1, kLamb.beta2, kLamb.eps,
                                kLamb.weight_decay, kLamb.step, kLambStepSize);
          })),
      // lars_squares only reads: its result is all it gives.
      read_only(optimizer_entry(
          "lars_squares", "weight_squares", {run_arg("value"), run_arg("grad")},
          [](const Args& a) { return lars_squares(a["value"], a["grad"]).first; },
          [](const Args& a) { return kernels::lars_squares(a.f("value"), a.f("grad"), length(a)).weights; })),
      read_only(optimizer_entry(
          "lars_squares", "gradient_squares", {run_arg("value"), run_arg("grad")},
          [](const Args& a) { return lars_squares(a["value"], a["grad"]).second; },
          [](const Args& a) { return kernels::lars_squares(a.f("value"), a.f("grad"), length(a)).grads; })),
      optimizer_entry("lars_update", "", sgd_args, returning_nothing([](const Args& a) {
                        lars_update(a["value"], a["grad"], a["momentum_buffer"], kLarsScale, kLarsDecay, kLarsMomentum);
                      }),
                      returning_nothing([](const Args& a) {
                        kernels::lars_update(a.f("value"), a.f("grad"), a.f("momentum_buffer"), length(a), kLarsScale,
                                             kLarsDecay, kLarsMomentum);
                      })),
      // The two maxima come back as the run's result, one entry each.
      optimizer_entry("adam8bit_block", "largest_m", adam8bit_args(), adam8bit_via_ops(Largest::M),
                      adam8bit_via_kernel(Largest::M)),
      optimizer_entry("adam8bit_block", "largest_v", adam8bit_args(), adam8bit_via_ops(Largest::V),
                      adam8bit_via_kernel(Largest::V)),
      optimizer_entry(
          "quantize_to_codes", "", {codes_arg("codes"), run_arg("values", 0.0, 0.7), codebook_arg("code")},
          returning_nothing([](const Args& a) { quantize_to_codes(a["codes"], a["values"], a["code"], kAbsmax); }),
          returning_nothing([](const Args& a) {
            kernels::quantize_to_codes(a["codes"].data<uint8_t>(), a.f("values"), length(a), a.f("code"),
                                       entries(a, "code"), kAbsmax);
          })),
      optimizer_entry(
          "one_bit_adam_momentum", "", {run_arg("m"), run_arg("grad")},
          returning_nothing([](const Args& a) { one_bit_adam_momentum(a["m"], a["grad"], kOneBitBeta1, kRanks); }),
          returning_nothing([](const Args& a) {
            kernels::one_bit_adam_momentum(a.f("m"), a.f("grad"), length(a), kOneBitBeta1, kRanks);
          })),
      optimizer_entry(
          "one_bit_adam_apply", "", {run_arg("value"), run_arg("m"), second_moment()},
          returning_nothing([](const Args& a) { one_bit_adam_apply(a["value"], a["m"], a["v"], kFrozenAdam); }),
          returning_nothing([](const Args& a) {
            kernels::one_bit_adam_apply(a.f("value"), a.f("m"), a.f("v"), length(a), kFrozenAdam.step_size,
                                        kFrozenAdam.bias2_sqrt, kFrozenAdam.eps, kFrozenAdam.decay);
          })),
      message_entry("sign_compress", {run_arg("acc"), bits_arg(), scales_arg()},
                    returning_nothing([](const Args& a) { sign_compress(a["acc"], a["bits"], a["scales"]); }),
                    returning_nothing([](const Args& a) {
                      kernels::sign_compress(std::span<float>(a.f("acc"), length(a)), a["bits"].data<uint8_t>(),
                                             a.f("scales"));
                    })),
      message_entry("add_sign_decompressed", {run_arg("out"), bits_arg(), scales_arg()},
                    returning_nothing(
                        [](const Args& a) { add_sign_decompressed(a["out"], a["bits"], a["scales"], kMessageWeight); }),
                    returning_nothing([](const Args& a) {
                      kernels::add_sign_decompressed(std::span<float>(a.f("out"), length(a)), a["bits"].data<uint8_t>(),
                                                     a.f("scales"), kMessageWeight);
                    })),
      read_only(adafactor_entry("adafactor_sums", "factored", {run_arg("value"), run_arg("grad")}, {},
                                adafactor_sums_via_ops(kFactored), adafactor_sums_via_kernel(kFactored))),
      read_only(adafactor_entry("adafactor_sums", "vector", {run_arg("value"), run_arg("grad")}, {},
                                adafactor_sums_via_ops(kVector), adafactor_sums_via_kernel(kVector))),
      // The row totals come back as the result.
      adafactor_entry(
          "adafactor_factored_moment", "", {factor_arg("row", "R"), factor_arg("col", "C")}, {},
          [](const Args& a) {
            const std::vector<double> rows = table(kFactored.matrices * kFactored.rows, 1.0),
                                      cols = table(kFactored.matrices * kFactored.cols, 2.0);
            std::vector<double> totals(static_cast<size_t>(kFactored.matrices));
            adafactor_factored_moment(a["row"], a["col"], rows, cols, kFactored, kOldWeight, kNewWeight, totals);
            return digest({totals});
          },
          [](const Args& a) {
            const std::vector<double> rows = table(kFactored.matrices * kFactored.rows, 1.0),
                                      cols = table(kFactored.matrices * kFactored.cols, 2.0);
            std::vector<double> totals(static_cast<size_t>(kFactored.matrices));
            kernels::adafactor_factored_moment(a.f("row"), a.f("col"), rows.data(), cols.data(), kFactored,
                                               kOldWeight, kNewWeight, totals.data());
            return digest({totals});
          }),
      adafactor_entry(
          "adafactor_vector_moment", "", {second_moment(), run_arg("grad")}, {},
          returning_nothing([](const Args& a) {
            adafactor_vector_moment(a["v"], a["grad"], kOldWeight, kNewWeight, static_cast<float>(kEps1));
          }),
          returning_nothing([](const Args& a) {
            kernels::adafactor_vector_moment(a.f("v"), a.f("grad"), length(a), kOldWeight, kNewWeight,
                                             static_cast<float>(kEps1));
          })),
      // The runs, not another tensor, bound the owned elements a factored pass reads: N is free.
      read_only(adafactor_entry(
          "adafactor_factored_update_squares", "", {run_arg("grad"), factor_arg("row", "R"), factor_arg("col", "C")},
          {"N"},
          [](const Args& a) {
            std::vector<double> squares = table(kFactored.groups, 4.0);
            adafactor_factored_update_squares(a["grad"], a["row"], a["col"], row_totals(a), runs_of(a, kFactored),
                                              kFactored, squares);
            return digest({squares});
          },
          [](const Args& a) {
            std::vector<double> squares = table(kFactored.groups, 4.0);
            const std::vector<double> totals = row_totals(a);
            const std::vector<ElementRun> runs = runs_of(a, kFactored);
            kernels::adafactor_update_squares(a.f("grad"), factored_moment(a, totals), runs.data(), runs.size(),
                                              kFactored, squares.data());
            return digest({squares});
          })),
      read_only(adafactor_entry(
          "adafactor_vector_update_squares", "", {run_arg("grad"), second_moment()}, {},
          [](const Args& a) {
            std::vector<double> squares = table(kVector.groups, 4.0);
            adafactor_vector_update_squares(a["grad"], a["v"], runs_of(a, kVector), kVector, squares);
            return digest({squares});
          },
          [](const Args& a) {
            std::vector<double> squares = table(kVector.groups, 4.0);
            const std::vector<ElementRun> runs = runs_of(a, kVector);
            kernels::adafactor_update_squares(a.f("grad"), vector_moment(a), runs.data(), runs.size(), kVector,
                                              squares.data());
            return digest({squares});
          })),
      adafactor_entry(
          "adafactor_factored_apply", "",
          {run_arg("value"), run_arg("grad"), optional_run_arg("m"), factor_arg("row", "R"), factor_arg("col", "C")},
          {}, returning_nothing([](const Args& a) {
            adafactor_factored_apply(a["value"], a["grad"], a["m"], a["row"], a["col"], row_totals(a),
                                     runs_of(a, kFactored), kFactored, group_steps(kFactored), kAdafactorBeta1);
          }),
          returning_nothing([](const Args& a) {
            const std::vector<double> totals = row_totals(a);
            const std::vector<ElementRun> runs = runs_of(a, kFactored);
            const std::vector<AdafactorGroupStep> steps = group_steps(kFactored);
            kernels::adafactor_apply(a.f("value"), a.f("grad"), a.f("m"), factored_moment(a, totals), runs.data(),
                                     runs.size(), kFactored, steps.data(), kAdafactorBeta1);
          })),
      adafactor_entry(
          "adafactor_vector_apply", "",
          {run_arg("value"), run_arg("grad"), optional_run_arg("m"), second_moment()}, {},
          returning_nothing([](const Args& a) {
            adafactor_vector_apply(a["value"], a["grad"], a["m"], a["v"], runs_of(a, kVector), kVector,
                                   group_steps(kVector), kAdafactorBeta1);
          }),
          returning_nothing([](const Args& a) {
            const std::vector<ElementRun> runs = runs_of(a, kVector);
            const std::vector<AdafactorGroupStep> steps = group_steps(kVector);
            kernels::adafactor_apply(a.f("value"), a.f("grad"), a.f("m"), vector_moment(a), runs.data(), runs.size(),
                                     kVector, steps.data(), kAdafactorBeta1);
          })),
  };
}

}  // namespace tessera::ops::testing
