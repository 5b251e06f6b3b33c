#pragma once
// Random graphs and chains for the tests of the planners over a graph (memory/remat): the MILP, the exhaustive
// search and DTR are compared on the same ones.
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <vector>

#include "memory/chain.h"
#include "memory/remat/graph.h"

namespace tessera::memory::remat::test_graphs {

// Node k reads each earlier node with probability 0.35, and its predecessor more often, so the graphs mix
// chains, diamonds and long skip edges. Sizes and costs are small integers (some zero) so equal costs compare
// exactly.
inline Graph random_graph(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> bytes(0, 9);
  std::uniform_int_distribution<int> cost(0, 9);
  std::bernoulli_distribution edge(0.35), chain_edge(0.8);
  Graph g;
  for (int k = 0; k < n; ++k) {
    GraphNode node{fmt::format("n{}", k), static_cast<double>(cost(rng)), bytes(rng), {}};
    for (int j = 0; j < k; ++j) {
      if (j == k - 1 ? chain_edge(rng) : edge(rng))
        node.inputs.push_back(j);
    }
    g.nodes.push_back(std::move(node));
  }
  return g;
}

// A chain of n units with small integer sizes and times and no extra bytes (chain_graph takes it).
inline std::vector<ChainUnit> random_chain(int n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int64_t> in(1, 9), own(0, 9);
  std::uniform_int_distribution<int> tf(1, 9), tb(1, 9);
  std::vector<ChainUnit> units(n);
  for (int i = 0; i < n; ++i)
    units[i].input_bytes = in(rng);
  for (int i = 0; i < n; ++i) {
    units[i].own_bytes = own(rng);
    units[i].output_bytes = i + 1 < n ? units[i + 1].input_bytes : 0;
    units[i].forward_time = tf(rng);
    units[i].backward_time = tb(rng);
  }
  return units;
}

}  // namespace tessera::memory::remat::test_graphs
