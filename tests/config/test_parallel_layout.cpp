// The one parallel layout value on its own: counts, names, and the check of every rule at once.
#include <gtest/gtest.h>

#include "config/parallel_layout.h"
#include "config/tensor_parallel_shape.h"
#include "core/check.h"

using namespace tessera;
using namespace tessera::config;

namespace {
std::string error_of(const ParallelLayout& l) {
  try {
    l.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ParallelLayout, CountsFollowTheFactors) {
  const ParallelLayout l{.dp = 4, .tp = 2, .pp = 2, .virtual_stages = 2, .ep = 2, .schedule = ScheduleKind::Interleaved,
                         .micro_batch = 2, .global_batch = 64};
  EXPECT_EQ(l.world_size(), 16);
  EXPECT_EQ(l.microbatches(), 8);  // 64 / (4 x 2)
  EXPECT_EQ(l.size(MeshDim::TP), 2);
  EXPECT_EQ(l.size(MeshDim::EP), 2);
  EXPECT_EQ(l.size(MeshDim::EDP), 2);
  EXPECT_EQ(error_of(l), "");
  EXPECT_EQ(error_of(ParallelLayout{}), "");
  EXPECT_EQ(ParallelLayout{.micro_batch = 0}.microbatches(), 0);  // no count rather than a division by zero
  const std::string d = l.describe();
  EXPECT_NE(d.find("dp 4 × pp 2 × tp 2"), std::string::npos) << d;
  EXPECT_NE(d.find("interleaved with v 2"), std::string::npos) << d;
}

TEST(ParallelLayout, ValidateListsEveryProblemWithItsFix) {
  ParallelLayout l;
  l.dp = 6;
  l.ep = 4;
  l.sp = true;
  l.zero_stage = 4;
  l.virtual_stages = 2;
  l.micro_batch = 2;
  l.global_batch = 40;
  const std::string e = error_of(l);
  EXPECT_NE(e.find("ep 4 does not divide dp 6"), std::string::npos) << e;
  EXPECT_NE(e.find("needs tp > 1"), std::string::npos) << e;
  EXPECT_NE(e.find("ZeRO stage 4 does not exist"), std::string::npos) << e;
  EXPECT_NE(e.find("only the interleaved schedule runs (the schedule is 1f1b)"), std::string::npos) << e;
  EXPECT_NE(e.find("the global batch 40 is not a multiple of dp 6 × micro batch 2 = 12"), std::string::npos) << e;
  EXPECT_NE(e.find("use a global batch of 36 or 48"), std::string::npos) << e;
  EXPECT_NE(error_of(ParallelLayout{.pp = 0}).find("pp is 0"), std::string::npos);
  EXPECT_NE(error_of(ParallelLayout{.global_batch = 0}).find("global batch is 0"), std::string::npos);
  // The world check is the mesh's: it ignores batch and schedule.
  l = ParallelLayout{.dp = 2, .global_batch = 3};
  EXPECT_NO_THROW(l.validate_world(2));
  EXPECT_THROW(l.validate_world(3), Error);
}

TEST(ParallelLayout, ScheduleNamesRoundTrip) {
  for (ScheduleKind k : kScheduleKinds) {
    EXPECT_EQ(parse_schedule_kind(schedule_name(k)), k);
    EXPECT_EQ(find_schedule_kind(schedule_name(k)), k);
  }
  EXPECT_EQ(find_schedule_kind("chimera"), std::nullopt);
  EXPECT_EQ(schedule_kind_names(), "gpipe, 1f1b, interleaved, 2bw, zb-h1");
  for (MeshDim dim : kMeshDims) EXPECT_FALSE(mesh_dim_name(dim).empty());
}

// Tensor parallelism must split the heads and the MLP width; the message names the values that do.
TEST(TensorParallelShape, RefusesATpThatDoesNotSplitTheModelWithTheValuesThatWork) {
  config::ModelConfig m;
  m.n_head = 6;
  m.n_embd = 96;  // GPT-2 MLP width 384
  EXPECT_FALSE(config::tensor_parallel_refusal(m, 1));
  EXPECT_FALSE(config::tensor_parallel_refusal(m, 3));
  EXPECT_FALSE(config::tensor_parallel_refusal(m, 6));
  const std::optional<std::string> four = config::tensor_parallel_refusal(m, 4);
  ASSERT_TRUE(four);
  EXPECT_NE(four->find("model.n_head = 6"), std::string::npos) << *four;
  EXPECT_NE(four->find("tp values that work: 1, 2, 3, 6"), std::string::npos) << *four;
  EXPECT_EQ(config::tensor_parallel_sizes(m, 8), (std::vector<int>{1, 2, 3, 6}));
  m.ffn_hidden = 100;  // 6 heads, but a width of 100 splits only in 1 and 2
  const std::optional<std::string> three = config::tensor_parallel_refusal(m, 3);
  ASSERT_TRUE(three);
  EXPECT_NE(three->find("hidden width 100"), std::string::npos) << *three;
}

// Grouped-query attention: tp must also divide the key/value heads, and the message says so.
TEST(TensorParallelShape, RefusesATpThatDoesNotDivideTheKeyValueHeads) {
  config::ModelConfig m;
  m.n_head = 8;
  m.n_kv_head = 2;
  m.n_embd = 64;
  EXPECT_FALSE(config::tensor_parallel_refusal(m, 2));
  const std::optional<std::string> four = config::tensor_parallel_refusal(m, 4);
  ASSERT_TRUE(four);
  EXPECT_NE(four->find("model.n_kv_head = 2 key/value heads do not divide among 4 ranks"), std::string::npos) << *four;
  EXPECT_NE(four->find("tp values that work: 1, 2"), std::string::npos) << *four;
  EXPECT_EQ(config::tensor_parallel_sizes(m, 8), (std::vector<int>{1, 2}));
}
