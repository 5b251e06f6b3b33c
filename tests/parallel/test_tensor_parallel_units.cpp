// Tensor-parallel arithmetic without MPI: the parameters a rank holds under the plan, counted by
// formula (config::tensor_parallel_rank_parameters, which the start-line memory estimate uses)
// and by building that rank's model.
#include <gtest/gtest.h>

#include "config/tensor_parallel_shape.h"
#include "core/allocator.h"
#include "nn/gpt.h"
#include "parallel/tensor_parallel.h"

using namespace tessera;

namespace {

config::ModelConfig small(config::Architecture arch, bool bias, bool tied, int vocab, int kv_heads) {
  config::ModelConfig m;
  m.arch = arch;
  m.n_layer = 2;
  m.n_head = 8;
  m.n_kv_head = kv_heads;
  m.n_embd = 32;
  m.vocab_size = vocab;
  m.seq_len = 16;
  m.bias = bias;
  m.tied_embeddings = tied;
  return m;
}

}  // namespace

TEST(TensorParallelUnits, ARanksParametersAreTheFormulas) {
  const std::vector<config::ModelConfig> models{
      small(config::Architecture::Gpt2, true, true, 61, 0), small(config::Architecture::Gpt2, false, false, 64, 4),
      small(config::Architecture::Llama, false, false, 53, 4), small(config::Architecture::Llama, true, true, 61, 2)};
  for (const config::ModelConfig& model : models) {
    EXPECT_EQ(config::tensor_parallel_rank_parameters(model, 1), model.parameter_count());
    for (int tp : {2, 4}) {
      if (model.kv_heads() % tp != 0) continue;
      for (int rank : {0, tp - 1}) {
        MemoryAccountant memory;
        const parallel::TensorParallelPlan plan(model, tp, rank);
        nn::GPT local(model, memory, 3, &plan);
        EXPECT_EQ(local.parameters().numel(), config::tensor_parallel_rank_parameters(model, tp))
            << config::architecture_name(model.arch) << " V" << model.vocab_size << " kv " << model.kv_heads()
            << " tp " << tp << " rank " << rank;
      }
    }
  }
}
