// Mixture of experts under mixed precision, under mpirun (2 ranks), GPT-2 with top-1 routing and
// Llama with top-2 (parity_harness.h's MoE models: tokens drop, dropout on):
//  - one process in bf16 and in fp16 tracks the fp32 run of the same microbatches: every step's
//    loss within the 2% of the dense precision tests (check_tracks_fp32);
//  - expert parallelism ep = dp = 2 in bf16 and fp16 equals the one-process run in the same dtype
//    as the fp32 MoE parity test holds it (check_matches_reference), with the same routing, the
//    all-to-all sending 16-bit rows (bytes = the formula at 2 bytes a value), and the activation
//    peak the program walk predicts;
//  - the same bf16 run twice gives the same bits;
//  - fp16's overflow check covers the experts' gradients: an infinite gradient in one expert on one
//    rank makes every rank skip that step and halves the loss scale.
#include <fmt/format.h>

#include <cstring>

#include "dist/mesh.h"
#include "nn/gpt.h"
#include "parallel/expert_parallel.h"
#include "parallel/rank_sum.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::testing;

namespace {

config::PrecisionOptions precision(DType compute) {
  config::PrecisionOptions p;
  p.compute = compute;
  p.loss_scaling.enabled = compute == DType::F16;
  p.loss_scaling.init_scale = 1024;
  return p;
}

ParityCase moe_case(const config::ModelConfig& model, int dp) {
  ParityCase c;
  c.name = config::architecture_name(model.arch);
  c.model = model;
  c.seq_len = model.seq_len;
  c.global_batch = 4 * dp;
  c.micros = 2;
  c.bucket_bytes = 2048;
  return c;
}

std::string describe(const ParityCase& c, const std::string& layout) {
  return fmt::format("{} top-{} {} {}", c.name, c.model.moe_top_k, config::precision_name(c.precision.compute),
                     layout);
}

void check_same_routing(const RunRecord& run, const RunRecord& ref, const std::string& what, RankChecks& t) {
  for (size_t s = 0; s < run.steps.size() && s < ref.steps.size(); ++s) {
    const nn::MoeStatistics &a = run.steps[s].moe, &b = ref.steps[s].moe;
    t.expect(a.dropped == b.dropped && a.load == b.load,
             fmt::format("{} step {}: {} dropped, the one-process run {}, or another load", what, s + 1, a.dropped,
                         b.dropped));
  }
}

// The four passes of the rows sent to the other expert-parallel rank carry C values of 2 bytes
// each; the routing counts and the gradient norm's part stay i32 and f64 (moe_parity_test.cpp).
void check_all_to_all_bytes(const ParityCase& c, const RunRecord& run, dist::Communicator& dp, int ep,
                            const std::string& what, RankChecks& t) {
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const nn::MoeStatistics& m = run.steps[s].moe;  // summed over dp
    const double measured = parallel::sum_over_ranks(
        &dp, std::vector<double>{static_cast<double>(run.steps[s].expert_comm.bytes_sent)})[0];
    const double expected = 4.0 * static_cast<double>(m.remote_rows) * c.model.n_embd * 2 +
                            static_cast<double>(m.routings) * (ep - 1) * (c.model.moe_experts / ep) * 4 +
                            static_cast<double>(dp.size()) * (ep - 1) * 8;
    t.expect(measured == expected && m.remote_rows > 0,
             fmt::format("{} step {}: {} bytes on the ep groups, the formula {} ({} remote rows)", what, s + 1,
                         measured, expected, m.remote_rows));
  }
}

void check_same_bits(const RunRecord& a, const RunRecord& b, const std::string& what, RankChecks& t) {
  bool same = a.params.size() == b.params.size() &&
              std::memcmp(a.params.data(), b.params.data(), sizeof(float) * a.params.size()) == 0;
  for (size_t s = 0; s < a.steps.size() && same; ++s) same = a.steps[s].loss == b.steps[s].loss;
  t.expect(same, fmt::format("{}: not the same bits", what));
}

// fp16 with a scale of 1024 over ep = dp: step 2 has an infinite gradient in the first MoE layer's
// experts on rank 0 only.
void check_expert_overflow_skips_everywhere(dist::Communicator& world, RankChecks& t) {
  config::ParallelLayout layout;
  layout.dp = world.size();
  layout.ep = world.size();
  layout.global_batch = world.size();
  dist::Mesh mesh(world, layout);
  const config::ModelConfig config = gpt2_moe_config();
  MemoryAccountant memory;
  const parallel::ExpertParallelPlan plan(config, layout.ep, mesh.ep().rank());
  nn::GPT model(config, memory, 5, &plan);
  parallel::EngineOptions options;
  options.layout = layout;
  options.seq_len = config.seq_len;
  options.precision = precision(DType::F16);
  options.precision.loss_scaling.growth_interval = 2;
  parallel::TrainingEngine engine(model, memory, &mesh, options);
  PoisonGradient poison(engine.ownership(), model.parameters().get("blocks.0.moe.experts.fc.weight"), 2,
                        world.rank() == 0);
  engine.transforms().add(exec::TransformSlot::Observer, poison);
  std::vector<int32_t> tokens(static_cast<size_t>(config.seq_len));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7 + world.rank()) % 37);
  const int T = config.seq_len;
  const exec::MicrobatchInput mb{
      {nn::token_tensor(tokens.data(), 1, T), nn::token_tensor(tokens.data(), 1, T), 1.0f / static_cast<float>(T)},
      world.rank()};
  std::vector<double> skipped, scales;
  for (int step = 0; step < 4; ++step) {
    const parallel::TrainingEngine::StepResult r = engine.train_step(std::span(&mb, 1), {}, 1e-3f, 1.0);
    skipped.push_back(r.skipped ? 1.0 : 0.0);
    scales.push_back(r.loss_scale);
  }
  const std::vector<double> total = parallel::sum_over_ranks(&world, skipped);
  const double n = world.size();
  t.expect(total[0] == 0 && total[1] == n && total[2] == 0 && total[3] == 0,
           fmt::format("fp16 MoE ep {}: ranks skipping each step: {}, {}, {}, {} of {} (want 0, all, 0, 0)", layout.ep,
                       total[0], total[1], total[2], total[3], n));
  t.expect(scales == std::vector<double>{1024, 1024, 512, 512},
           fmt::format("fp16 MoE ep {}: loss scales {}, {}, {}, {} (want 1024, 1024, 512, 512)", layout.ep, scales[0],
                       scales[1], scales[2], scales[3]));
  engine.transforms().remove(exec::TransformSlot::Observer);
}

}  // namespace

int main(int argc, char** argv) {
  return run_rank_checks(argc, argv, [](dist::Communicator& world, RankChecks& t) {
    const int n = world.size();
    config::ParallelLayout layout;
    layout.dp = n;
    layout.ep = n;
    for (const config::ModelConfig& model : {gpt2_moe_config(), llama_moe_config()}) {
      const ParityCase parallel_case = moe_case(model, n);
      layout.global_batch = parallel_case.global_batch;
      dist::Mesh mesh(world, layout);
      // One process runs the parallel run's microbatches in turn (the capacity is per microbatch).
      ParityCase one = parallel_case;
      one.micros = parallel_case.micros * n;
      const RunRecord fp32 = run_parallel(one, nullptr);
      for (DType compute : {DType::BF16, DType::F16}) {
        ParityCase one16 = one;
        one16.precision = precision(compute);
        const RunRecord alone = run_parallel(one16, nullptr);
        check_tracks_fp32(alone, fp32, describe(one16, "one process"), t);
        check_activation_prediction(alone, describe(one16, "one process"), t);

        ParityCase ep = parallel_case;
        ep.precision = precision(compute);
        const std::string what = describe(ep, fmt::format("dp {} ep {}", n, n));
        const RunRecord run = run_parallel(ep, &mesh);
        check_matches_reference(run, alone, what, t);
        check_same_routing(run, alone, what, t);
        check_all_to_all_bytes(ep, run, mesh.dp(), n, what, t);
        check_activation_prediction(run, what, t);
        if (compute == DType::BF16) {
          check_same_bits(run, run_parallel(ep, &mesh),
                          what + " rerun", t);
        }
        if (t.rank == 0) fmt::print("{}: checked\n", what);
      }
    }
    check_expert_overflow_skips_everywhere(world, t);
  });
}
