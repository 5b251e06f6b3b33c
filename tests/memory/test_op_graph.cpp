// The graph of operations recorded from running blocks (exec/op_graph_recording.h): it has the ops
// the modules run, its backward reads exactly what the units saved (the bytes the runtime counts),
// the trace changes no result, and Checkmate over it is never costlier than Rotor over the same
// blocks as a chain of units, and meets budgets below Rotor's least.
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "config/activation_bytes.h"
#include "core/op_trace.h"
#include "core/rng.h"
#include "exec/op_graph_recording.h"
#include "memory/chain.h"
#include "memory/optimal.h"
#include "memory/recompute_policy.h"
#include "memory/remat/milp.h"
#include "nn/gpt.h"

using namespace tessera;
using config::Architecture;
using config::ModelConfig;

namespace {

ModelConfig small_config(Architecture arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.vocab_size = 61;
  c.seq_len = 16;
  c.bias = arch == Architecture::Gpt2;
  return c;
}

constexpr int64_t kB = 2, kT = 16;

}  // namespace

// The ops of one block, as the modules run them (nn/block.cpp, attention.cpp, mlp.cpp, norm.cpp,
// linear.cpp: a projection into the residual stream adds its bias apart),
// and the bytes its backward reads, as the runtime counts what a block keeps.
TEST(OpGraph, ABlocksGraphHasItsOpsAndItsBackwardReadsWhatItSaved) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    const ModelConfig c = small_config(arch);
    MemoryAccountant mem;
    nn::GPT model(c, mem, 1);
    const exec::OpGraphRecording r = exec::record_op_graph(model, mem, 1, 1, kB, kT, 1);
    const std::vector<std::string> forward =
        arch == Architecture::Gpt2
            ? std::vector<std::string>{"layernorm_forward", "linear_forward", "attention_forward", "linear_forward",
                                       "add_bias", "add_inplace", "layernorm_forward", "linear_forward",
                                       "gelu_forward", "linear_forward", "add_bias", "add_inplace"}
            : std::vector<std::string>{"rmsnorm_forward", "linear_forward", "rope_forward", "attention_forward",
                                       "linear_forward", "add_inplace", "rmsnorm_forward", "linear_forward",
                                       "linear_forward", "swiglu_forward", "linear_forward", "add_inplace"};
    const memory::remat::OpGraph& g = r.graph;
    ASSERT_EQ(g.chain.size(), 1u);
    std::vector<std::string> names;
    for (const auto& node : g.graph.nodes) names.push_back(node.name);
    // Sources: the block's input and the gradient from above; then its forward, then its backward.
    EXPECT_EQ(g.sources, 2);
    EXPECT_EQ(names.front(), "input");
    ASSERT_GT(names.size(), forward.size() + 2);
    EXPECT_EQ(std::vector<std::string>(names.begin() + 1, names.begin() + 1 + forward.size()), forward);
    EXPECT_EQ(names[1 + forward.size()], "gradient");
    EXPECT_EQ(g.graph.size(), 2 + static_cast<int>(r.trace.ops().size()));
    // The backward: every op after the forward's, the attention's among them, gradients 0 bytes.
    std::set<std::string> backward(names.begin() + 2 + forward.size(), names.end());
    EXPECT_TRUE(backward.count("attention_backward"));
    EXPECT_TRUE(backward.count("linear_backward"));
    for (size_t i = 2 + forward.size(); i < names.size(); ++i) EXPECT_EQ(g.graph.nodes[i].bytes, 0) << names[i];

    const config::UnitActivationBytes bytes = config::unit_activation_bytes(c, kB, kT)[1];
    EXPECT_EQ(g.chain[0].own_bytes, bytes.own);
    EXPECT_EQ(g.chain[0].output_bytes, bytes.output);
    EXPECT_EQ(g.chain[0].input_bytes, bytes.output);
    // The forward's values no backward reads are held only while the forward runs.
    EXPECT_GT(g.chain[0].forward_extra_bytes, 0);
    int64_t all = 0;
    for (int i = 1; i <= static_cast<int>(forward.size()); ++i) all += g.graph.nodes[static_cast<size_t>(i)].bytes;
    EXPECT_EQ(all - g.chain[0].own_bytes - g.chain[0].output_bytes,
              [&] {
                int64_t unread = 0;
                const auto users = memory::remat::graph_users(g.graph);
                const int last_forward = static_cast<int>(forward.size());
                for (int i = 1; i < last_forward; ++i) {
                  bool backward_reads = false;
                  for (int u : users[static_cast<size_t>(i)]) backward_reads |= u > last_forward;
                  if (!backward_reads) unread += g.graph.nodes[static_cast<size_t>(i)].bytes;
                }
                return unread;
              }());
    EXPECT_GT(g.op_cost, 0);
  }
}

// Two blocks: the second reads the first's output, and the first's backward the second's input gradient.
TEST(OpGraph, ChainedBlocksShareTheirBoundaries) {
  const ModelConfig c = small_config(Architecture::Gpt2);
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  const exec::OpGraphRecording r = exec::record_op_graph(model, mem, 1, 2, kB, kT, 2);
  const memory::remat::OpGraph& g = r.graph;
  ASSERT_EQ(g.chain.size(), 2u);
  EXPECT_EQ(g.sources, 2);  // one input, one gradient from above
  const auto bytes = config::unit_activation_bytes(c, kB, kT);
  for (int u = 0; u < 2; ++u) EXPECT_EQ(g.chain[static_cast<size_t>(u)].own_bytes, bytes[1 + u].own);
  EXPECT_EQ(g.chain[0].output_bytes, g.chain[1].input_bytes);
  memory::check_chain(g.chain);
}

// With a trace installed, a training step computes the same bits as without.
TEST(OpGraph, TheTraceChangesNoResult) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    const ModelConfig c = small_config(arch);
    std::vector<int32_t> tokens(static_cast<size_t>(kB * kT)), targets(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(uniform(3, 1, i) * static_cast<float>(c.vocab_size));
      targets[i] = static_cast<int32_t>(uniform(3, 2, i) * static_cast<float>(c.vocab_size));
    }
    auto step_grads = [&](OpTrace* trace, double* loss) {
      MemoryAccountant mem;
      nn::GPT model(c, mem, 1);
      nn::StepContext step{mem, model.parameters()};
      nn::GPT::Ctx ctx;
      const OpTraceInstall install(trace);
      *loss = model.forward(step, ctx, tokens.data(), targets.data(), kB, kT, 1.0f);
      model.backward(step, ctx);
      const Tensor& g = model.parameters().flat_grads();
      return std::vector<float>(g.data<float>(), g.data<float>() + g.numel());
    };
    double loss_off = 0, loss_on = 0;
    const std::vector<float> off = step_grads(nullptr, &loss_off);
    OpTrace trace;
    const std::vector<float> on = step_grads(&trace, &loss_on);
    EXPECT_GT(trace.size(), 20);
    EXPECT_EQ(std::memcmp(&loss_off, &loss_on, sizeof(double)), 0);
    ASSERT_EQ(off.size(), on.size());
    EXPECT_EQ(std::memcmp(off.data(), on.data(), off.size() * sizeof(float)), 0);
  }
}

// Checkmate over the op graph against Rotor over the same blocks as a chain, with the same measured
// costs. Rotor's schedule, mapped into the op graph, costs no more and peaks no higher there, at
// every budget from Rotor's least to none's peak; CBC starts from it, so Checkmate is never costlier
// (solved here at Rotor's least: CBC's search is the slow part).
TEST(OpGraph, CheckmateOnTheOpGraphIsNeverCostlierThanRotorOnTheChain) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    const ModelConfig c = small_config(arch);
    MemoryAccountant mem;
    nn::GPT model(c, mem, 1);
    const exec::OpGraphRecording r = exec::record_op_graph(model, mem, 1, 2, kB, kT, 2);
    const memory::remat::OpGraph& g = r.graph;
    const int64_t rotor_least = memory::minimum_budget(g.chain);
    const int64_t none_peak = memory::simulate(g.chain, memory::none_schedule(2)).peak_bytes;
    const double pinned = g.pinned_cost * g.sources;
    int recomputing = 0;
    for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
      const auto budget = rotor_least + static_cast<int64_t>(f * static_cast<double>(none_peak - rotor_least));
      const memory::ChainSchedule chain = memory::optimal_schedule(g.chain, budget);
      const auto rotor = memory::simulate(g.chain, chain);
      ASSERT_LE(rotor.peak_bytes, budget);
      recomputing += rotor.recomputed_forwards > 0;
      const memory::remat::Schedule start = memory::remat::op_graph_schedule(g, chain);
      const auto mapped = memory::remat::simulate_schedule(g.graph, start);
      EXPECT_LE(mapped.peak_bytes, rotor.peak_bytes) << "budget " << budget;
      EXPECT_LE(mapped.cost - pinned, rotor.time * (1 + 1e-9)) << "budget " << budget;
      if (f > 0 || arch != Architecture::Gpt2) continue;
      memory::remat::SolveOptions options{.time_limit_s = 10};
      options.start = start;
      const memory::remat::Solution s = memory::remat::solve_milp(g.graph, budget, options);
      ASSERT_TRUE(s.has_schedule()) << "budget " << budget;
      EXPECT_LE(s.peak_bytes, budget);
      EXPECT_LE(s.cost - pinned, rotor.time * (1 + 1e-9)) << "budget " << budget;
    }
    EXPECT_GT(recomputing, 0) << "Rotor recomputes at none of the budgets";
  }
}

// Below Rotor's least budget (one block: Rotor can only keep it whole), Checkmate recomputes parts of
// the block: its least budget is lower, and halfway between the two it finds a schedule.
TEST(OpGraph, CheckmateOnTheOpGraphMeetsBudgetsBelowRotorsLeast) {
  for (Architecture arch : {Architecture::Gpt2, Architecture::Llama}) {
    const ModelConfig c = small_config(arch);
    MemoryAccountant mem;
    nn::GPT model(c, mem, 1);
    const exec::OpGraphRecording r = exec::record_op_graph(model, mem, 1, 1, kB, kT, 1);
    const memory::remat::OpGraph& g = r.graph;
    const int64_t rotor_least = memory::minimum_budget(g.chain);
    const memory::remat::SolveOptions options{.time_limit_s = 5};
    const memory::remat::MinimumBudget least = memory::remat::minimum_budget(g.graph, options);
    EXPECT_LT(least.bytes, rotor_least);
    const int64_t budget = (least.bytes + rotor_least) / 2;
    const memory::remat::Solution s = memory::remat::solve_milp(g.graph, budget, options);
    ASSERT_TRUE(s.has_schedule()) << "budget " << budget << ", Rotor's least " << rotor_least;
    EXPECT_LE(s.peak_bytes, budget);
    EXPECT_GT(s.cost - g.pinned_cost * g.sources, g.op_cost) << "it recomputes";
  }
}
