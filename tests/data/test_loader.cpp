// The loader: windows and targets, epochs and shuffling, sharding by data-parallel rank and
// microbatch, exact resume, and too-short corpora.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "data/loader.h"
#include "data/window_order.h"
#include "test_util.h"

namespace tessera::data {
namespace {

using testing::ScratchDir;

// Token i of the file is i itself, so a row's first input names its window start.
std::shared_ptr<const TokenFile> counting_file(const ScratchDir& dir, int32_t count) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), 0);
  write_token_file(dir / "count.bin", tokens, 65536);
  return TokenFile::open(dir / "count.bin", 65536);
}

Batch concat(const std::vector<Batch>& parts) {
  Batch all;
  for (const Batch& b : parts) {
    all.rows += b.rows;
    all.seq_len = b.seq_len;
    all.inputs.insert(all.inputs.end(), b.inputs.begin(), b.inputs.end());
    all.targets.insert(all.targets.end(), b.targets.begin(), b.targets.end());
  }
  return all;
}

void expect_same(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.seq_len, b.seq_len);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
}

TEST(WindowOrder, IsAPermutationForAnySize) {
  for (uint64_t n : {1u, 2u, 3u, 5u, 16u, 17u, 100u, 1000u, 4097u}) {
    for (uint64_t epoch : {0u, 1u, 7u}) {
      const WindowOrder order(n, 42, epoch);
      std::vector<bool> seen(n, false);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t w = order(i);
        ASSERT_LT(w, n);
        ASSERT_FALSE(seen[w]) << "n " << n << " epoch " << epoch << ": window " << w << " twice";
        seen[w] = true;
      }
    }
  }
}

TEST(WindowOrder, ShufflesDifferentlyPerEpochAndSeed) {
  const uint64_t n = 1000;
  auto sequence = [&](uint64_t seed, uint64_t epoch) {
    std::vector<uint64_t> v(n);
    const WindowOrder order(n, seed, epoch);
    for (uint64_t i = 0; i < n; ++i) v[i] = order(i);
    return v;
  };
  const auto a = sequence(1, 0);
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
  EXPECT_NE(a, sequence(1, 1));
  EXPECT_NE(a, sequence(2, 0));
  EXPECT_EQ(a, sequence(1, 0));
  // Well mixed: few positions keep their window.
  int fixed = 0;
  for (uint64_t i = 0; i < n; ++i) fixed += a[i] == i;
  EXPECT_LT(fixed, 20);
}

TEST(Loader, TargetsAreInputsShiftedByOneFromTheFile) {
  ScratchDir dir;
  const auto file = counting_file(dir, 1001);
  TokenLoader loader(file, {.seq_len = 10, .global_batch = 4, .seed = 3, .shuffle = true});
  EXPECT_EQ(loader.windows_per_epoch(), 100);
  const Batch b = loader.next();
  ASSERT_EQ(b.rows, 4);
  ASSERT_EQ(b.inputs.size(), 40u);
  for (int64_t r = 0; r < 4; ++r) {
    const int32_t start = b.inputs[static_cast<size_t>(r * 10)];
    EXPECT_EQ(start % 10, 0) << "windows start at multiples of seq_len";
    EXPECT_EQ(start, loader.window_start(static_cast<uint64_t>(r)));
    for (int64_t t = 0; t < 10; ++t) {
      EXPECT_EQ(b.inputs[static_cast<size_t>(r * 10 + t)], start + t);
      EXPECT_EQ(b.targets[static_cast<size_t>(r * 10 + t)], start + t + 1);
    }
  }
}

TEST(Loader, EachEpochVisitsEveryWindowOnceAcrossBatchBoundaries) {
  ScratchDir dir;
  const auto file = counting_file(dir, 701);  // 70 windows of 10; batches of 8 straddle epochs
  TokenLoader loader(file, {.seq_len = 10, .global_batch = 8, .seed = 9});
  std::vector<int32_t> starts;
  for (int step = 0; step < 18; ++step) {  // 144 sequences: two full epochs and a bit
    const Batch b = loader.next();
    for (int64_t r = 0; r < b.rows; ++r) starts.push_back(b.inputs[static_cast<size_t>(r * 10)]);
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int32_t> windows(starts.begin() + epoch * 70, starts.begin() + (epoch + 1) * 70);
    EXPECT_EQ(windows.size(), 70u) << "epoch " << epoch;
    EXPECT_EQ(*windows.rbegin(), 690);
  }
  EXPECT_FALSE(std::equal(starts.begin(), starts.begin() + 70, starts.begin() + 70)) << "epochs reshuffle";
  EXPECT_EQ(loader.epoch(), 2u);
  EXPECT_EQ(loader.cursor(), 4u);
}

TEST(Loader, WithoutShuffleWindowsComeInFileOrder) {
  ScratchDir dir;
  const auto file = counting_file(dir, 55);  // 6 windows of 9 tokens (+1)
  TokenLoader loader(file, {.seq_len = 9, .global_batch = 4, .seed = 1, .shuffle = false});
  const Batch a = loader.next();
  const Batch b = loader.next();
  EXPECT_EQ(a.inputs[0], 0);
  EXPECT_EQ(a.inputs[9], 9);
  EXPECT_EQ(a.inputs[27], 27);
  EXPECT_EQ(b.inputs[0], 36);
  EXPECT_EQ(b.inputs[9], 45);
  EXPECT_EQ(b.inputs[18], 0) << "the next epoch starts over";
  EXPECT_EQ(b.targets[8], 45) << "the last window reads the file's last usable token";
}

TEST(Loader, IsDeterministicAndKeyedBySeed) {
  ScratchDir dir;
  const auto file = counting_file(dir, 5000);
  TokenLoader a(file, {.seq_len = 32, .global_batch = 6, .seed = 11});
  TokenLoader b(file, {.seq_len = 32, .global_batch = 6, .seed = 11});
  TokenLoader c(file, {.seq_len = 32, .global_batch = 6, .seed = 12});
  bool differs = false;
  for (int step = 0; step < 5; ++step) {
    const Batch x = a.next();
    expect_same(x, b.next());
    differs = differs || x.inputs != c.next().inputs;
  }
  EXPECT_TRUE(differs);
}

// The core layout property: whatever the data-parallel size and microbatching, the rows of a step
// are the same sequences in the same order.
TEST(Loader, RankShardsAndMicrobatchesConcatenateToTheGlobalBatch) {
  ScratchDir dir;
  const auto file = counting_file(dir, 20000);
  for (int64_t global : {8, 6, 7}) {
    TokenLoader loader(file, {.seq_len = 16, .global_batch = global, .seed = 5});
    for (int step = 0; step < 3; ++step) {
      const Batch whole = loader.global_batch();
      for (int64_t ranks : {1, 2, 4}) {
        std::vector<Batch> shards;
        for (int64_t r = 0; r < ranks; ++r) {
          shards.push_back(loader.shard(r, ranks));
          std::vector<Batch> micros;
          const int64_t m = std::min<int64_t>(2, shards.back().rows);
          for (int64_t k = 0; k < m; ++k) micros.push_back(loader.microbatch(r, ranks, k, m));
          expect_same(concat(micros), shards.back());
        }
        expect_same(concat(shards), whole);
        // Uneven splits (7 or 6 rows over 4 ranks) differ by at most one row between ranks.
        const auto [lo, hi] = std::minmax_element(shards.begin(), shards.end(),
                                                  [](const Batch& x, const Batch& y) { return x.rows < y.rows; });
        EXPECT_LE(hi->rows - lo->rows, 1);
      }
      loader.advance();
    }
  }
}

TEST(Loader, ShardingMoreWaysThanRowsIsAClearError) {
  ScratchDir dir;
  TokenLoader loader(counting_file(dir, 1000), {.seq_len = 8, .global_batch = 2, .seed = 0});
  EXPECT_ERROR_WITH(loader.shard(0, 4), "2 rows cannot be split into 4");
  EXPECT_ERROR_WITH(loader.microbatch(0, 2, 0, 2), "1 rows cannot be split into 2");
  EXPECT_ERROR_WITH(loader.shard(2, 2), "part 2 of 2");
}

TEST(Loader, SavedStateResumesWithTheSameNextBatch) {
  ScratchDir dir;
  const auto file = counting_file(dir, 3000);
  const LoaderOptions options{.seq_len = 24, .global_batch = 5, .seed = 77};
  TokenLoader original(file, options);
  for (int step = 0; step < 30; ++step) original.advance();  // past the first epoch (124 windows)
  const LoaderState saved = original.state();
  EXPECT_EQ(saved.sequences, 150u);
  EXPECT_EQ(saved.steps, 30u);
  const Batch expected_next = original.next();
  const Batch expected_after = original.next();

  TokenLoader resumed(file, options);
  resumed.restore(saved);
  EXPECT_EQ(resumed.state(), saved);
  EXPECT_EQ(resumed.epoch(), 1u);
  expect_same(resumed.next(), expected_next);
  expect_same(resumed.next(), expected_after);
  EXPECT_EQ(resumed.state(), original.state());
}

TEST(Loader, StateSurvivesJsonExactly) {
  LoaderState s;
  s.sequences = (uint64_t{1} << 62) + 12345;  // beyond a double's 53 bits
  s.steps = 77;
  s.seed = ~uint64_t{0};
  s.seq_len = 1024;
  s.tokens = 988181;
  s.shuffle = false;
  const auto text = to_json(s).dump();
  EXPECT_EQ(loader_state_from_json(nlohmann::json::parse(text)), s);
  auto j = nlohmann::json::parse(text);
  j.erase("seed");
  EXPECT_ERROR_WITH(loader_state_from_json(j), "no \"seed\"");
  j["seed"] = "seven";
  EXPECT_ERROR_WITH(loader_state_from_json(j), "\"seed\" must be a non-negative integer", "\"seven\"");
  // Values nlohmann would convert silently are refused, not reinterpreted.
  for (const char* key : {"sequences", "steps", "seq_len", "tokens"}) {
    for (const char* bad : {"-3", "2.5", "null", "true"}) {
      auto k = nlohmann::json::parse(text);
      k[key] = nlohmann::json::parse(bad);
      EXPECT_ERROR_WITH(loader_state_from_json(k), key);
    }
  }
  auto big = nlohmann::json::parse(text);
  big["tokens"] = ~uint64_t{0};
  EXPECT_ERROR_WITH(loader_state_from_json(big), "\"tokens\" must be a non-negative integer");
  auto flag = nlohmann::json::parse(text);
  flag["shuffle"] = 1;
  EXPECT_ERROR_WITH(loader_state_from_json(flag), "\"shuffle\" must be true or false");
  EXPECT_ERROR_WITH(loader_state_from_json(nlohmann::json::array()), "expected an object");
}

TEST(Loader, ResumeWithAnotherGlobalBatchContinuesTheSameStream) {
  ScratchDir dir;
  const auto file = counting_file(dir, 3000);
  TokenLoader five(file, {.seq_len = 24, .global_batch = 5, .seed = 4});
  for (int step = 0; step < 3; ++step) five.advance();
  TokenLoader ten(file, {.seq_len = 24, .global_batch = 10, .seed = 4});
  ten.restore(five.state());
  const Batch big = ten.next();
  expect_same(big, concat({five.next(), five.next()}));
}

TEST(Loader, RestoringAnotherStreamIsAClearError) {
  ScratchDir dir;
  const auto file = counting_file(dir, 3000);
  TokenLoader a(file, {.seq_len = 24, .global_batch = 5, .seed = 4});
  TokenLoader other_seed(file, {.seq_len = 24, .global_batch = 5, .seed = 5});
  TokenLoader other_len(file, {.seq_len = 16, .global_batch = 5, .seed = 4});
  EXPECT_ERROR_WITH(other_seed.restore(a.state()), "seed 4", "seed 5");
  EXPECT_ERROR_WITH(other_len.restore(a.state()), "seq_len 24", "seq_len 16");
}

TEST(Loader, CorpusShorterThanSeqLenPlusOneIsAClearError) {
  ScratchDir dir;
  const auto file = counting_file(dir, 64);
  EXPECT_ERROR_WITH(TokenLoader(file, {.seq_len = 64, .global_batch = 1}), "has 64 tokens", "seq_len + 1 = 65");
  EXPECT_ERROR_WITH(TokenLoader(file, {.seq_len = 1000, .global_batch = 1}), "has 64 tokens", "seq_len + 1 = 1001");
  // Exactly seq_len + 1 tokens make one window.
  TokenLoader one(file, {.seq_len = 63, .global_batch = 2});
  EXPECT_EQ(one.windows_per_epoch(), 1);
  const Batch b = one.next();
  EXPECT_EQ(b.inputs[0], 0);
  EXPECT_EQ(b.inputs[63], 0) << "the single window repeats";
  EXPECT_ERROR_WITH(TokenLoader(file, {.seq_len = 0, .global_batch = 1}), "seq_len must be at least 1");
  EXPECT_ERROR_WITH(TokenLoader(file, {.seq_len = 8, .global_batch = 0}), "at least 1 sequence");
}

TEST(Loader, EmptyTokenFileIsTooShort) {
  ScratchDir dir;
  write_token_file(dir / "empty.bin", std::vector<int32_t>{}, 100);
  EXPECT_ERROR_WITH(TokenLoader(TokenFile::open(dir / "empty.bin"), {.seq_len = 8, .global_batch = 1}),
                    "empty.bin has 0 tokens", "seq_len + 1 = 9");
}

}  // namespace
}  // namespace tessera::data
