// Data parallelism and ZeRO without MPI: the shard and bucket arithmetic, the memory formulas, the
// sharded optimizer, and every stage on a group of one against plain training.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "nn/gpt.h"
#include "optim/adamw.h"
#include "parallel/buckets.h"
#include "parallel/zero_memory.h"
#include "parity_harness.h"

using namespace tessera;
using namespace tessera::parallel;
using tessera::testing::ParityCase;

TEST(ShardLayout, ShardsAreContiguousAndDifferByAtMostOne) {
  for (int64_t numel : {0, 1, 7, 6975, 1000}) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      ShardLayout layout(numel, ranks);
      int64_t at = 0;
      for (int r = 0; r < ranks; ++r) {
        const nn::ParamRange s = layout.shard(r);
        EXPECT_EQ(s.begin, at);
        EXPECT_TRUE(s.size() == numel / ranks || s.size() == numel / ranks + 1) << numel << " over " << ranks;
        EXPECT_LE(s.size(), layout.largest_shard());
        at = s.end;
      }
      EXPECT_EQ(at, numel);
    }
  }
  ShardLayout layout(10, 4);  // shards [0,2) [2,5) [5,7) [7,10)
  EXPECT_EQ(layout.counts({1, 8}), (std::vector<size_t>{1, 3, 2, 1}));
  EXPECT_EQ(layout.counts({3, 4}), (std::vector<size_t>{0, 1, 0, 0}));
  EXPECT_EQ(layout.part({1, 8}, 2).begin, 5);
  EXPECT_EQ(layout.part({3, 4}, 0).size(), 0);
  EXPECT_THROW(layout.shard(4), Error);
}

// A pipeline rank's domain: each piece split on its own, so two layouts that share a piece (the
// tied embedding on the first and the last stage) give rank r the same part of it.
TEST(ShardLayout, PiecesAreSplitEachOnItsOwn) {
  ShardLayout layout({{0, 10}, {20, 23}, {30, 31}}, 2);  // parts [0,5) [5,10) | [20,21) [21,23) | [] [30,31)
  EXPECT_EQ(layout.numel(), 14);
  EXPECT_EQ(layout.shards(0), (std::vector<nn::ParamRange>{{0, 5}, {20, 21}}));
  EXPECT_EQ(layout.shards(1), (std::vector<nn::ParamRange>{{5, 10}, {21, 23}, {30, 31}}));
  EXPECT_EQ(layout.shard_size(0), 6);
  EXPECT_EQ(layout.shard_size(1), 8);
  EXPECT_EQ(layout.largest_shard(), 8);
  EXPECT_EQ(layout.shard_offset(1, 22), 6);  // after [5,10) and [21,22)
  EXPECT_EQ(layout.counts({8, 10}), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(layout.part({20, 23}, 1).begin, 21);
  EXPECT_THROW(layout.counts({9, 21}), Error);  // across two pieces: no single collective
  EXPECT_THROW(layout.shard(0), Error);         // no single contiguous shard
  EXPECT_THROW(layout.shard_offset(0, 7), Error);
  EXPECT_THROW(ShardLayout({{5, 10}, {8, 12}}, 2), Error);
  const ShardLayout first({{0, 10}, {10, 40}}, 3), last({{0, 10}, {60, 90}}, 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(first.part({0, 10}, r), last.part({0, 10}, r));
}

TEST(Buckets, StayInsideTheirPieceOfTheDomain) {
  MemoryAccountant mem;
  nn::GPT model(tessera::testing::gpt2_odd_config(), mem, 1);
  const auto& units = model.units();
  const nn::Parameter& wte = model.parameters().get("embed.tokens.weight");
  const auto wte_end = static_cast<int64_t>(wte.offset) + wte.numel();
  // The last stage of a tied GPT-2: the head's unit and the shared embedding table alone.
  const nn::ParamRange head = units[static_cast<size_t>(model.head_unit())].owned;
  const std::vector<nn::ParamRange> domain = {{static_cast<int64_t>(wte.offset), wte_end}, head};
  const std::vector<Bucket> buckets = plan_buckets(units, int64_t{1} << 40, domain);
  ASSERT_EQ(buckets.size(), 2u) << "one bucket per piece even when the size would take both";
  EXPECT_EQ(buckets[0].range, head);
  EXPECT_EQ(buckets[1].range, domain[0]) << "the embedding unit is cut where the shared table ends";
  EXPECT_EQ(buckets[1].complete_unit, 0);
}

TEST(Buckets, FillFromTheEndAndCompleteAfterTheLastWriter) {
  MemoryAccountant mem;
  nn::GPT model(tessera::testing::gpt2_odd_config(), mem, 1);  // tied: the head writes the embedding's gradient
  const auto& units = model.units();
  const int head = model.head_unit();
  // One bucket per unit when the bucket is smaller than any unit.
  std::vector<Bucket> small = plan_buckets(units, 1);
  ASSERT_EQ(small.size(), units.size());
  int64_t end = model.parameters().numel();
  for (size_t i = 0; i < small.size(); ++i) {
    const int u = head - static_cast<int>(i);
    EXPECT_EQ(small[i].range.end, end);
    EXPECT_EQ(small[i].range.begin, units[static_cast<size_t>(u)].owned.begin);
    end = small[i].range.begin;
    EXPECT_EQ(small[i].complete_unit, u);
    EXPECT_EQ(small[i].first_unit, u == 0 ? head : u) << "the embedding's bucket is first written by the tied head";
  }
  EXPECT_EQ(end, 0);
  // One bucket for everything.
  std::vector<Bucket> one = plan_buckets(units, int64_t{1} << 40);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].range.size(), model.parameters().numel());
  EXPECT_EQ(one[0].first_unit, head);
  EXPECT_EQ(one[0].complete_unit, 0);
  // Buckets close once they reach the size: every bucket but the last holds at least that much.
  const int64_t size = model.parameters().numel() / 3;
  std::vector<Bucket> mid = plan_buckets(units, size);
  for (size_t i = 0; i + 1 < mid.size(); ++i) EXPECT_GE(mid[i].range.size(), size);
  EXPECT_THROW(plan_buckets(units, 0), Error);
}

TEST(ZeroFormulas, MatchThePaper) {
  const int64_t psi = 1000;
  const int n = 4;
  const int64_t shard = psi / n;
  EXPECT_EQ(zero_bytes(0, psi, shard).total(), 16 * psi);
  EXPECT_EQ(zero_bytes(1, psi, shard).total(), 8 * psi + 8 * psi / n);
  EXPECT_EQ(zero_bytes(2, psi, shard).total(), 4 * psi + 12 * psi / n);
  EXPECT_EQ(zero_bytes(3, psi, shard).total(), 16 * psi / n);
  const double all_reduce = 2.0 * (n - 1) / n * 4 * psi;
  EXPECT_DOUBLE_EQ(zero_step_bytes(0, psi, n, 4), all_reduce);
  EXPECT_DOUBLE_EQ(zero_step_bytes(1, psi, n, 4), all_reduce);
  EXPECT_DOUBLE_EQ(zero_step_bytes(2, psi, n, 1), all_reduce);
  EXPECT_DOUBLE_EQ(zero_step_bytes(3, psi, n, 1), 1.5 * all_reduce);
  EXPECT_THROW(zero_bytes(4, psi, shard), Error);
}

// Two optimizers over the two halves of the buffer give the same bits as one over the whole,
// with weight decay by parameter (the split falls inside a matrix).
TEST(ShardedAdamW, HalvesEqualTheWholeBitwise) {
  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  MemoryAccountant mem;
  nn::GPT whole(c, mem, 3), halves(c, mem, 3);
  const int64_t n = whole.parameters().numel();
  for (nn::GPT* m : {&whole, &halves}) {
    float* g = m->parameters().flat_grads().data<float>();
    for (int64_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>((i * 37) % 101 - 50);
  }
  nn::ParameterStore& h = halves.parameters();
  float* values = h.flat_values().data<float>();
  float* grads = h.flat_grads().data<float>();
  const std::vector<optim::Segment> low = optim::segments_of_range(h, {0, n / 2}, values, grads, 0);
  const std::vector<optim::Segment> high = optim::segments_of_range(h, {n / 2, n}, values + n / 2, grads + n / 2, 0);
  optim::AdamW one(mem, {}, n);
  optim::AdamW lo(mem, {}, n / 2);
  optim::AdamW hi(mem, {}, n - n / 2);
  EXPECT_EQ(mem.stats().live_of(MemoryTag::Optimizer), static_cast<size_t>(8 * n * 2));
  for (int s = 0; s < 3; ++s) {
    one.step(1e-2f, optim::whole_parameters(whole.parameters()));
    lo.step(1e-2f, low);
    hi.step(1e-2f, high);
  }
  EXPECT_EQ(std::memcmp(whole.parameters().flat_values().data<float>(), values, sizeof(float) * static_cast<size_t>(n)),
            0);
  EXPECT_THROW(lo.step(1e-2f, high), Error) << "segments that do not cover the optimizer's state are refused";
}

// A group of one: every stage runs the same arithmetic as plain training (without accumulation),
// so it matches the single-process reference bit for bit.
TEST(DataParallel, GroupOfOneEqualsPlainTrainingBitwise) {
  for (int stage = 0; stage <= 3; ++stage) {
    ParityCase c;
    c.model = tessera::testing::gpt2_odd_config();
    c.zero_stage = stage;
    c.steps = 3;
    tessera::testing::RunRecord ref = tessera::testing::run_reference(c);
    tessera::testing::RunRecord run = tessera::testing::run_data_parallel(c, nullptr);
    for (size_t s = 0; s < ref.steps.size(); ++s) {
      EXPECT_EQ(run.steps[s].loss, ref.steps[s].loss) << "stage " << stage << " step " << s;
      EXPECT_EQ(run.steps[s].grad_norm, ref.steps[s].grad_norm) << "stage " << stage << " step " << s;
    }
    EXPECT_EQ(run.params, ref.params) << "stage " << stage;
    // With accumulation the sums group differently: equal within the parity tolerance.
    c.micros = 2;
    run = tessera::testing::run_data_parallel(c, nullptr);
    for (size_t s = 0; s < ref.steps.size(); ++s) {
      EXPECT_NEAR(run.steps[s].loss, ref.steps[s].loss, 1e-5 * ref.steps[s].loss) << "stage " << stage;
    }
  }
}

// ZeRO-3 keeps no whole parameters: reading one outside the unit that runs fails loudly.
TEST(DataParallel, ZeroThreeParametersExistOnlyWhileGathered) {
  config::ModelConfig c = tessera::testing::gpt2_odd_config();
  MemoryAccountant mem;
  nn::GPT model(c, mem, 1);
  exec::ParameterOwnership ownership(model.parameters());
  exec::TransformChain chain;
  DataParallelOptions options;
  options.zero_stage = 3;
  options.bucket_bytes = 1024;
  DataParallel dp(model.parameters(), model.units(), nullptr, mem, options, ownership, chain);
  const nn::Parameter& qkv = model.parameters().get("blocks.0.attn.qkv.weight");
  EXPECT_FALSE(model.parameters().holds_values());
  EXPECT_THROW(model.parameters().value(qkv), Error);
  EXPECT_EQ(mem.stats().live_of(MemoryTag::Params), sizeof(float) * static_cast<size_t>(model.parameters().numel()));
  {
    auto full = dp.full_parameters();
    EXPECT_TRUE(full.weight(qkv).defined());
  }
  // Running the model outside a program is refused with a message saying what to do.
  nn::StepContext ctx{mem, ownership};
  std::vector<int32_t> tokens(16, 1);
  nn::GPT::Ctx fwd;
  try {
    model.forward(ctx, fwd, tokens.data(), tokens.data(), 1, 16, 1.0f);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("interpreter"), std::string::npos) << e.what();
  }
  // A second owner of the working copies is refused, naming both.
  struct Other final : exec::StorageOwner {
    std::string_view owner_name() const override { return "another technique"; }
  } other;
  try {
    ownership.claim(exec::Role::Working, other);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO-3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("another technique"), std::string::npos) << e.what();
  }
}
