// The optimizer updates under test (ops/optimizer_update.h), one entry each: 1-D f32 runs of
// master values, gradients and state whose length no vector width divides, and each op's
// optional momentum buffer given and left out. Second moments are drawn positive, as they are.
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

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
  };
}

}  // namespace tessera::ops::testing
