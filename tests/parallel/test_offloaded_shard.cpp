// ZeRO-3's shard in the nvme tier without MPI: parts cut at parameter boundaries (and at the
// shard's), ranges of whole parts read back as written, the optimizer's owned order mapped onto
// the shard, and a range that cuts a part refused.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "../memory/store_test_support.h"
#include "nn/parameters.h"
#include "parallel/offloaded_shard.h"

using namespace tessera;
using namespace tessera::parallel;

TEST(OffloadedShard, RangesOfWholePartsComeBackAsWritten) {
  memory::testing::TempDir dir;
  memory::NvmeStore store({.dir = dir.str()});
  MemoryAccountant accountant;
  nn::ParameterStore params;
  params.declare("a", {3, 5}, nn::ParameterRole::Weight, nn::Init::Zeros);  // [0, 15)
  params.declare("b", {7}, nn::ParameterRole::Bias, nn::Init::Zeros);     // [15, 22)
  params.declare("c", {2000}, nn::ParameterRole::Bias, nn::Init::Zeros);  // [22, 2022)
  params.allocate(accountant);
  // The second of two shards: [1011, 2022), inside c; and a shard that holds a, b and part of c.
  for (const nn::ParamRange mine : {nn::ParamRange{1011, 2022}, nn::ParamRange{0, 1011}}) {
    std::vector<float> values(static_cast<size_t>(mine.size()));
    std::iota(values.begin(), values.end(), static_cast<float>(mine.begin));
    OffloadedShard shard(store, params, mine, values.data());
    std::vector<float> back(values.size(), -1.0f);
    OffloadedShard::Works works = shard.read_range(mine, back.data());
    wait_all(works);
    EXPECT_EQ(back, values);
    if (mine.begin == 0) {
      // b alone, read into the middle of a buffer; then written over and read through the owned order.
      std::vector<float> b(7, -1.0f);
      works = shard.read(15, 7, b.data());
      wait_all(works);
      EXPECT_EQ(b, std::vector<float>(values.begin() + 15, values.begin() + 22));
      const std::vector<float> twos(7, 2.0f);
      works = shard.write(15, 7, twos.data());
      wait_all(works);
      works = shard.read_range({0, 22}, back.data());
      wait_all(works);
      EXPECT_EQ(std::vector<float>(back.begin() + 15, back.begin() + 22), twos);
      EXPECT_EQ(std::vector<float>(back.begin(), back.begin() + 15), std::vector<float>(values.begin(), values.begin() + 15));
      // A range that cuts a parameter's part is refused.
      EXPECT_THROW(shard.read_range({0, 10}, back.data()), Error);
      EXPECT_THROW(shard.read_range({14, 22}, back.data()), Error);
    }
  }
  EXPECT_EQ(store.live_bytes(), 0u) << "the extents are released with the shard";
}
