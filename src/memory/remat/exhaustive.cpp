#include "memory/remat/exhaustive.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace tessera::memory::remat {

namespace {

constexpr int kMaxNodes = 14;

using Front = std::vector<ParetoPoint>;

// Adds p unless a point of the front is at least as good in both; drops the points p beats.
void insert(Front& front, ParetoPoint p) {
  for (const auto& q : front) {
    if (q.peak_bytes <= p.peak_bytes && q.cost <= p.cost)
      return;
  }
  std::erase_if(front, [&](const ParetoPoint& q) { return p.peak_bytes <= q.peak_bytes && p.cost <= q.cost; });
  front.push_back(p);
}

struct Stage {
  double cost = 0;
  int64_t peak = 0;
  uint32_t run = 0;  // the nodes computed
};

// The graph as bit masks, and what one stage costs.
class Stages {
 public:
  explicit Stages(const Graph& graph) : graph_(graph) {
    check_graph(graph);
    const int n = graph.size();
    TS_CHECK(n <= kMaxNodes, "the exhaustive search takes graphs of at most {} nodes, not {}", kMaxNodes, n);
    inputs_.assign(static_cast<size_t>(n), 0);
    readers_.assign(static_cast<size_t>(n), 0);
    for (int k = 0; k < n; ++k) {
      for (int j : graph.nodes[k].inputs) {
        inputs_[k] |= 1u << j;
        readers_[j] |= 1u << k;
      }
    }
  }
  // The states of stage t+1: every subset of {0..t}, or only the empty one after the last stage.
  uint32_t next_states(int t) const { return t + 1 < graph_.size() ? (1u << (t + 1)) : 1u; }
  // Stage t, starting with `held` and keeping `keep` into stage t+1.
  Stage operator()(int t, uint32_t held, uint32_t keep) const;

 private:
  const Graph& graph_;
  std::vector<uint32_t> inputs_, readers_;
};

Stage Stages::operator()(int t, uint32_t held, uint32_t keep) const {
  const Graph& graph = graph_;
  const auto& inputs = inputs_;
  const auto& readers = readers_;
  uint32_t run = (1u << t) | (keep & ~held);
  for (int k = t; k >= 0; --k) {
    if (run >> k & 1u)
      run |= inputs[k] & ~held;
  }
  Stage s;
  s.run = run;
  uint32_t live = held;
  int64_t mem = 0;
  for (int i = 0; i < t; ++i) {
    if (held >> i & 1u)
      mem += graph.nodes[i].bytes;
  }
  s.peak = mem;
  for (int k = 0; k <= t; ++k) {
    if (!(run >> k & 1u))
      continue;
    s.cost += graph.nodes[k].cost;
    mem += graph.nodes[k].bytes;
    live |= 1u << k;
    s.peak = std::max(s.peak, mem);
    const uint32_t later = run & ~((2u << k) - 1u);
    uint32_t candidates = (inputs[k] | (1u << k)) & live & ~keep;
    while (candidates != 0) {
      const int i = __builtin_ctz(candidates);
      candidates &= candidates - 1;
      if ((readers[i] & later) == 0) {
        live &= ~(1u << i);
        mem -= graph.nodes[i].bytes;
      }
    }
  }
  return s;
}

}  // namespace

std::vector<ParetoPoint> exhaustive_frontier(const Graph& graph) {
  const Stages stage(graph);
  const int n = graph.size();
  std::vector<Front> fronts(1, Front{ParetoPoint{0, 0.0}});
  for (int t = 0; t < n; ++t) {
    const uint32_t next_states = stage.next_states(t);
    std::vector<Front> next(next_states);
    for (uint32_t held = 0; held < fronts.size(); ++held) {
      if (fronts[held].empty())
        continue;
      for (uint32_t keep = 0; keep < next_states; ++keep) {
        const Stage s = stage(t, held, keep);
        for (const auto& p : fronts[held]) {
          insert(next[keep], ParetoPoint{std::max(p.peak_bytes, s.peak), p.cost + s.cost});
        }
      }
    }
    fronts = std::move(next);
  }
  Front out = std::move(fronts[0]);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.peak_bytes < b.peak_bytes; });
  return out;
}

std::optional<Schedule> exhaustive_schedule(const Graph& graph, int64_t budget_bytes) {
  const Stages stage(graph);
  const int n = graph.size();
  constexpr double kUnreached = std::numeric_limits<double>::infinity();
  // best[t][state]: least cost of stages before t ending in S[t] = state; from[t][state]: S[t-1].
  std::vector<std::vector<double>> best(1, std::vector<double>(1, 0.0));
  std::vector<std::vector<uint32_t>> from(1, std::vector<uint32_t>(1, 0));
  for (int t = 0; t < n; ++t) {
    const uint32_t next_states = stage.next_states(t);
    std::vector<double> cost(next_states, kUnreached);
    std::vector<uint32_t> pred(next_states, 0);
    for (uint32_t held = 0; held < best[t].size(); ++held) {
      if (best[t][held] == kUnreached)
        continue;
      for (uint32_t keep = 0; keep < next_states; ++keep) {
        const Stage s = stage(t, held, keep);
        if (s.peak <= budget_bytes && best[t][held] + s.cost < cost[keep]) {
          cost[keep] = best[t][held] + s.cost;
          pred[keep] = held;
        }
      }
    }
    best.push_back(std::move(cost));
    from.push_back(std::move(pred));
  }
  if (best[n][0] == kUnreached)
    return std::nullopt;
  BoolMatrix S(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  uint32_t state = 0;  // S[n]
  for (int t = n; t > 0; --t) {
    state = from[t][state];  // S[t-1]
    for (int i = 0; i < n; ++i)
      S[t - 1][i] = state >> i & 1u;
  }
  Schedule out;
  out.S = S;
  out.R.assign(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  for (int t = 0; t < n; ++t) {
    const uint32_t keep = t + 1 < n ? [&] {
      uint32_t m = 0;
      for (int i = 0; i <= t; ++i) m |= static_cast<uint32_t>(S[t + 1][i]) << i;
      return m;
    }() : 0u;
    uint32_t held = 0;
    for (int i = 0; i < t; ++i)
      held |= static_cast<uint32_t>(S[t][i]) << i;
    const uint32_t run = stage(t, held, keep).run;
    for (int i = 0; i <= t; ++i)
      out.R[t][i] = run >> i & 1u;
  }
  return out;
}

std::optional<double> cheapest_within(const std::vector<ParetoPoint>& frontier, int64_t budget_bytes) {
  std::optional<double> best;
  for (const auto& p : frontier) {
    if (p.peak_bytes <= budget_bytes && (!best || p.cost < *best))
      best = p.cost;
  }
  return best;
}

}  // namespace tessera::memory::remat
