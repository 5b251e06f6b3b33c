#pragma once
// An exhaustive search over the states of chain.h's rules, for the tests of the schedulers that
// must never beat it (optimal.h, dtr.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

#include "memory/chain.h"

namespace tessera::memory::chain_search {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Exhaustive search over the states of chain.h's rules, written from the rules and not from the
// simulator. Each unit's input is absent, present, stored as a checkpoint, or held with the unit's
// kept activations; with b that is the state. Every op that may run is an edge. The forward phase
// only allows the next unit's forward (any keep; the loss unit keeps all) and then Backward(n-1),
// since a ChainSchedule can express nothing else there.
//
// Persistent search (Rotor's class, what optimal_schedule solves): an input kept by a forward
// (Input or All) stays until its unit's backward, so forward(i, keep=nothing) may only consume an
// input no forward of unit i kept. The full search drops that rule.
class BruteForce {
 public:
  BruteForce(const std::vector<ChainUnit>& units, bool persistent)
      : u_(units), n_(static_cast<int>(units.size())), persistent_(persistent) {}

  // Least time of a complete schedule whose every op peaks at <= budget; kInf when none does.
  double min_time(int64_t budget) const {
    return search(0.0, [&](double d, const Edge& e) { return e.peak <= budget ? d + e.time : kInf; });
  }

  // Least peak of any complete schedule: a bottleneck shortest path.
  int64_t min_peak() const {
    const double p = search(static_cast<double>(u_[0].input_bytes),
                            [](double d, const Edge& e) { return std::max(d, static_cast<double>(e.peak)); });
    return static_cast<int64_t>(p);
  }

 private:
  enum Input : uint8_t { kAbsent, kPresent, kStored, kKept };
  struct State {
    std::array<uint8_t, 8> input{};  // Input per unit
    int b = 0;
  };
  struct Edge {
    State to;
    int64_t peak = 0;
    double time = 0;
  };

  std::size_t key(const State& s) const {
    std::size_t k = static_cast<std::size_t>(s.b);
    for (int i = 0; i < n_; ++i) k = k * 4 + s.input[i];
    return k;
  }
  int64_t live(const State& s) const {
    int64_t bytes = 0;
    for (int i = 0; i < n_; ++i) {
      if (s.input[i] != kAbsent) bytes += u_[i].input_bytes;
      if (s.input[i] == kKept) bytes += u_[i].own_bytes;
    }
    return bytes;
  }

  std::vector<Edge> edges(const State& s) const {
    std::vector<Edge> out;
    const int64_t now = live(s);
    auto forward = [&](int i, Keep keep) {
      const uint8_t x = s.input[i];
      if (i >= s.b || x == kAbsent || x == kKept) return;
      if (i + 1 < s.b && s.input[i + 1] != kAbsent) return;
      if (keep == Keep::Nothing && persistent_ && x == kStored) return;
      Edge e{s, now + u_[i].own_bytes + u_[i].output_bytes + u_[i].forward_extra_bytes, u_[i].forward_time};
      if (i + 1 < s.b && i + 1 < n_) e.to.input[i + 1] = kPresent;
      if (keep == Keep::All) e.to.input[i] = kKept;
      if (keep == Keep::Input) e.to.input[i] = kStored;
      if (keep == Keep::Nothing) e.to.input[i] = kAbsent;
      out.push_back(e);
    };
    auto backward = [&](int i) {
      if (i != s.b - 1 || s.input[i] != kKept) return;
      Edge e{s, now + u_[i].backward_extra_bytes, u_[i].backward_time};
      e.to.input[i] = kAbsent;
      e.to.b = i;
      out.push_back(e);
    };
    if (s.b == n_) {
      if (s.input[n_ - 1] == kKept) {
        backward(n_ - 1);
      } else {
        int next = 0;  // the highest present input is the last output of the forward pass
        for (int i = 0; i < n_; ++i)
          if (s.input[i] != kAbsent) next = i;
        forward(next, Keep::All);
        if (next < n_ - 1) {
          forward(next, Keep::Input);
          forward(next, Keep::Nothing);
        }
      }
      return out;
    }
    for (int i = 0; i < s.b; ++i)
      for (Keep k : {Keep::All, Keep::Input, Keep::Nothing}) forward(i, k);
    backward(s.b - 1);
    return out;
  }

  // Dijkstra with a monotone path cost: relax(d, e) gives the cost through e (kInf: not allowed).
  double search(double start_cost, const std::function<double(double, const Edge&)>& relax) const {
    std::vector<double> dist(static_cast<std::size_t>(n_ + 1) << (2 * n_), kInf);
    using Item = std::pair<double, State>;
    auto later = [](const Item& a, const Item& b) { return a.first > b.first; };
    std::priority_queue<Item, std::vector<Item>, decltype(later)> queue(later);
    State start;
    start.input[0] = kPresent;
    start.b = n_;
    dist[key(start)] = start_cost;
    queue.push({start_cost, start});
    while (!queue.empty()) {
      const auto [d, s] = queue.top();
      queue.pop();
      if (d > dist[key(s)]) continue;
      if (s.b == 0) return d;
      for (const Edge& e : edges(s)) {
        const double nd = relax(d, e);
        if (nd < dist[key(e.to)]) {
          dist[key(e.to)] = nd;
          queue.push({nd, e.to});
        }
      }
    }
    return kInf;
  }

  const std::vector<ChainUnit>& u_;
  int n_;
  bool persistent_;
};

inline double brute_min_time(const std::vector<ChainUnit>& units, int64_t budget, bool persistent = true) {
  return BruteForce(units, persistent).min_time(budget);
}

}  // namespace tessera::memory::chain_search
