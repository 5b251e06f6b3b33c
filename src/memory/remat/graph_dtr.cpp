#include "memory/remat/graph_dtr.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace tessera::memory::remat {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class GraphDtr {
 public:
  GraphDtr(const Graph& graph, int64_t budget, std::vector<std::uint8_t> pinned)
      : g_(graph), n_(graph.size()), budget_(budget), users_(graph_users(graph)), pinned_(std::move(pinned)),
        last_reader_(static_cast<size_t>(n_), -1), resident_(static_cast<size_t>(n_), 0),
        computed_(static_cast<size_t>(n_), 0), pending_(static_cast<size_t>(n_), 0),
        used_(static_cast<size_t>(n_), 0.0) {
    for (int i = 0; i < n_; ++i) {
      if (!users_[i].empty()) last_reader_[i] = users_[i].back();
    }
  }

  // The schedule DTR ran (not pruned), or nullopt when an allocation did not fit.
  std::optional<Schedule> run() {
    Schedule out;
    out.R.assign(static_cast<size_t>(n_), std::vector<std::uint8_t>(static_cast<size_t>(n_), 0));
    out.S = out.R;
    std::vector<std::uint8_t> needed(static_cast<size_t>(n_));
    for (int t = 0; t < n_; ++t) {
      stage_ = t;
      for (int i = 0; i < t; ++i) out.S[t][i] = resident_[i];
      // What stage t computes: node t and, transitively, the inputs that are not resident. Inputs come before
      // their readers, so one downward pass closes the set.
      std::fill(needed.begin(), needed.end(), 0);
      needed[t] = 1;
      for (int k = t; k >= 0; --k) {
        if (!needed[k]) continue;
        for (int j : g_.nodes[k].inputs) {
          if (!resident_[j]) needed[j] = 1;
        }
      }
      for (int k = 0; k <= t; ++k) {
        if (!needed[k]) continue;
        for (int j : g_.nodes[k].inputs) ++pending_[j];
      }
      for (int k = 0; k <= t; ++k) {
        if (!needed[k]) continue;
        if (!make_room(g_.nodes[k].bytes)) return std::nullopt;
        compute(k);
        out.R[t][k] = 1;
      }
    }
    return out;
  }

  double compute_cost() const { return compute_cost_; }
  int64_t held_peak() const { return held_peak_; }
  int evictions() const { return evictions_; }

 private:
  void compute(int k) {
    const GraphNode& node = g_.nodes[k];
    live_ += node.bytes;
    resident_[k] = computed_[k] = 1;
    used_[k] = clock_;
    for (int j : node.inputs) used_[j] = clock_;
    clock_ += node.cost;
    compute_cost_ += node.cost;
    for (int j : node.inputs) {
      --pending_[j];
      release(j);
    }
    release(k);
  }

  // Frees a resident tensor that nothing of this stage still reads and no later node of the program reads.
  void release(int i) {
    if (resident_[i] && pending_[i] == 0 && last_reader_[i] <= stage_) {
      resident_[i] = 0;
      live_ -= g_.nodes[i].bytes;
    }
  }

  // h_DTR^eq's c for evicting i: the cost of i's producer and of every non-resident tensor connected to it
  // through non-resident tensors that bringing it back, or bringing back what still needs it, would recompute:
  // missing inputs (freed ones too, a rematerialization may need them) and evicted readers the program still
  // reads.
  double neighbourhood_cost(int i) const {
    std::vector<std::uint8_t> seen(static_cast<size_t>(n_), 0);
    std::vector<int> stack{i};
    seen[i] = 1;
    double cost = 0;
    while (!stack.empty()) {
      const int k = stack.back();
      stack.pop_back();
      cost += g_.nodes[k].cost;
      for (int j : g_.nodes[k].inputs) {
        if (!seen[j] && !resident_[j]) {
          seen[j] = 1;
          stack.push_back(j);
        }
      }
      for (int u : users_[k]) {
        if (!seen[u] && computed_[u] && !resident_[u] && last_reader_[u] > stage_) {
          seen[u] = 1;
          stack.push_back(u);
        }
      }
    }
    return cost;
  }

  // Evicts by least h until `need` more bytes fit; false when nothing evictable is left.
  bool make_room(int64_t need) {
    while (live_ + need > budget_) {
      int best = -1;
      double best_h = kInf;
      for (int i = 0; i < n_; ++i) {
        const int64_t m = g_.nodes[i].bytes;
        if (!resident_[i] || pending_[i] > 0 || pinned_[i] || m <= 0) continue;
        const double c = neighbourhood_cost(i), s = clock_ - used_[i];
        const double h = c == 0 ? 0 : s > 0 ? c / (static_cast<double>(m) * s) : kInf;
        if (best < 0 || h < best_h || (h == best_h && m > g_.nodes[best].bytes)) {
          best = i;
          best_h = h;
        }
      }
      if (best < 0) return false;
      resident_[best] = 0;
      live_ -= g_.nodes[best].bytes;
      ++evictions_;
    }
    held_peak_ = std::max(held_peak_, live_ + need);
    return true;
  }

  const Graph& g_;
  int n_;
  int64_t budget_;
  std::vector<std::vector<int>> users_;
  std::vector<std::uint8_t> pinned_;
  std::vector<int> last_reader_;  // the last node of the program reading each, -1 for none
  std::vector<std::uint8_t> resident_, computed_;
  std::vector<int> pending_;  // readers of each still to run in this stage: locked while > 0
  std::vector<double> used_;  // the clock when each was last produced or read
  int stage_ = 0;
  int64_t live_ = 0, held_peak_ = 0;
  double clock_ = 0, compute_cost_ = 0;
  int evictions_ = 0;
};

}  // namespace

std::vector<std::uint8_t> pinned_inputs(const Graph& graph) {
  double ops = 0;
  for (const GraphNode& node : graph.nodes) {
    if (!node.inputs.empty()) ops += node.cost;
  }
  std::vector<std::uint8_t> out(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    out[i] = graph.nodes[i].inputs.empty() && graph.nodes[i].cost > ops;
  }
  return out;
}

std::optional<GraphDtrSchedule> graph_dtr_schedule(const Graph& graph, int64_t budget_bytes,
                                                   const GraphDtrOptions& options) {
  check_graph(graph);
  std::vector<std::uint8_t> pinned = options.pinned.empty() ? pinned_inputs(graph) : options.pinned;
  TS_CHECK(static_cast<int>(pinned.size()) == graph.size(), "DTR was given {} pins for a graph of {} nodes",
           pinned.size(), graph.size());
  GraphDtr dtr(graph, budget_bytes, std::move(pinned));
  const std::optional<Schedule> ran = dtr.run();
  if (!ran) return std::nullopt;
  GraphDtrSchedule out;
  out.schedule = prune_schedule(graph, *ran);
  const ScheduleCost sim = simulate_schedule(graph, out.schedule);
  // The simulator's accounting is the contract; by construction it holds no more than DTR did (graph_dtr.h).
  if (sim.peak_bytes > budget_bytes) return std::nullopt;
  out.cost = sim.cost;
  out.peak_bytes = sim.peak_bytes;
  out.computations = sim.computations;
  out.dtr_cost = dtr.compute_cost();
  out.held_peak = dtr.held_peak();
  out.evictions = dtr.evictions();
  return out;
}

}  // namespace tessera::memory::remat
