#pragma once
// The float GEMM of a run (precision.f32_gemm, kernels/cpu/gemm_choice.h): the library given, in
// narrow blocks, or the fastest of oneDNN and OpenBLAS in narrow and wide blocks on the model's
// products with this process's threads. A measurement is kept per machine (float-gemm.json beside
// the matmul peak, train/machine_cache.h), keyed by the CPU, the thread count, OpenBLAS's core and
// the products, so a machine measures each model shape once and every later run (a resume above
// all) computes the same way. Collective over `world`: the ranks add their times up and every
// rank takes the same.
#include <cstdint>
#include <string>
#include <vector>

#include "config/precision.h"
#include "dist/communicator.h"
#include "kernels/cpu/gemm_choice.h"
#include "nn/gpt.h"

namespace tessera::train {

// The products of one microbatch's forward and backward through the model's linear layers:
// `tokens` rows (microbatch × sequence) through every weight nn::GPT::linear_weight_shapes lists.
std::vector<kernels::GemmProblem> model_gemm_problems(const nn::GPT& model, int64_t tokens);

struct FloatGemmChoice {
  kernels::FloatGemm chosen;
  std::string reason;  // for the start line: "precision.f32_gemm", or the times it was chosen by
};

// Chooses, and sets it for this process (kernels::use_float_gemm).
FloatGemmChoice choose_float_gemm(config::FloatGemmSetting setting, const std::vector<kernels::GemmProblem>& problems,
                                  dist::Communicator* world);

}  // namespace tessera::train
