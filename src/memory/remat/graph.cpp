#include "memory/remat/graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/check.h"

namespace tessera::memory::remat {

namespace {

std::string node_label(const Graph& graph, int i) {
  const auto& name = graph.nodes[static_cast<size_t>(i)].name;
  return name.empty() ? fmt::format("node {}", i) : fmt::format("node {} ('{}')", i, name);
}

}  // namespace

void check_graph(const Graph& graph) {
  TS_CHECK(graph.size() > 0, "a rematerialization graph needs at least one node");
  for (int k = 0; k < graph.size(); ++k) {
    const auto& node = graph.nodes[static_cast<size_t>(k)];
    TS_CHECK(std::isfinite(node.cost) && node.cost >= 0, "{} has cost {}: costs must be finite and not negative",
             node_label(graph, k), node.cost);
    TS_CHECK(node.bytes >= 0, "{} has {} bytes: output sizes must not be negative", node_label(graph, k), node.bytes);
    for (size_t a = 0; a < node.inputs.size(); ++a) {
      const int j = node.inputs[a];
      TS_CHECK(j >= 0 && j < graph.size(), "{} reads node {}, which does not exist (the graph has {} nodes)",
               node_label(graph, k), j, graph.size());
      TS_CHECK(j < k,
               "{} reads node {}: inputs must come earlier in the node order "
               "(a cycle, or nodes not in a "
               "topological order)",
               node_label(graph, k), j);
      for (size_t b = 0; b < a; ++b) {
        TS_CHECK(node.inputs[b] != j, "{} lists input {} twice", node_label(graph, k), j);
      }
    }
  }
}

std::vector<std::vector<int>> graph_users(const Graph& graph) {
  std::vector<std::vector<int>> users(graph.nodes.size());
  for (int k = 0; k < graph.size(); ++k) {
    for (int j : graph.nodes[static_cast<size_t>(k)].inputs)
      users[static_cast<size_t>(j)].push_back(k);
  }
  return users;
}

ScheduleCost simulate_schedule(const Graph& graph, const Schedule& schedule) {
  check_graph(graph);
  const int n = graph.size();
  const auto& R = schedule.R;
  const auto& S = schedule.S;
  TS_CHECK(static_cast<int>(R.size()) == n && static_cast<int>(S.size()) == n,
           "a schedule of a {}-node graph needs {} stages, got R with {} and S "
           "with {}",
           n, n, R.size(), S.size());
  for (int t = 0; t < n; ++t) {
    TS_CHECK(static_cast<int>(R[t].size()) == n && static_cast<int>(S[t].size()) == n,
             "stage {} of the schedule has {} entries in R and {} in S, expected {}", t, R[t].size(), S[t].size(), n);
    TS_CHECK(R[t][t] == 1, "stage {} must compute {} (R[{}][{}] = 1)", t, node_label(graph, t), t, t);
    for (int i = t; i < n; ++i) {
      TS_CHECK(i == t || R[t][i] == 0, "stage {} computes {}, which comes after the stage's own node", t,
               node_label(graph, i));
      TS_CHECK(S[t][i] == 0, "stage {} keeps {}, which cannot have been computed before it", t, node_label(graph, i));
    }
  }
  const auto users = graph_users(graph);
  ScheduleCost out;
  std::vector<std::uint8_t> live(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) {
    int64_t mem = 0;
    for (int i = 0; i < n; ++i) {
      TS_CHECK(!(R[t][i] && S[t][i]), "stage {} recomputes {}, which it keeps from the stage before", t,
               node_label(graph, i));
      live[i] = S[t][i];
      if (live[i])
        mem += graph.nodes[i].bytes;
    }
    out.peak_bytes = std::max(out.peak_bytes, mem);
    const auto kept_next = [&](int i) { return t + 1 < n && S[t + 1][i]; };
    for (int k = 0; k <= t; ++k) {
      if (!R[t][k])
        continue;
      const auto& node = graph.nodes[static_cast<size_t>(k)];
      for (int j : node.inputs) {
        TS_CHECK(live[j],
                 "stage {} computes {}, but its input {} is not resident "
                 "(neither computed earlier in "
                 "the stage nor kept into it)",
                 t, node_label(graph, k), node_label(graph, j));
      }
      mem += node.bytes;
      live[k] = 1;
      out.peak_bytes = std::max(out.peak_bytes, mem);
      out.cost += node.cost;
      ++out.computations;
      // Free what k was the last reader of in this stage, and k itself when nobody reads it here.
      const auto try_free = [&](int i) {
        if (!live[i] || kept_next(i))
          return;
        for (int user : users[i]) {
          if (user > k && user <= t && R[t][user])
            return;
        }
        live[i] = 0;
        mem -= graph.nodes[i].bytes;
      };
      for (int j : node.inputs)
        try_free(j);
      try_free(k);
    }
    for (int i = 0; i < n; ++i) {
      TS_CHECK(!kept_next(i) || live[i], "stage {} keeps {}, which is not resident at the end of stage {}", t + 1,
               node_label(graph, i), t);
    }
  }
  return out;
}

Schedule minimal_recompute(const Graph& graph, const BoolMatrix& S) {
  check_graph(graph);
  const int n = graph.size();
  TS_CHECK(static_cast<int>(S.size()) == n, "S has {} stages for a {}-node graph", S.size(), n);
  Schedule out;
  out.S = S;
  out.R.assign(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  for (int t = 0; t < n; ++t) {
    TS_CHECK(static_cast<int>(S[t].size()) == n, "S[{}] has {} entries, expected {}", t, S[t].size(), n);
    for (int i = t; i < n; ++i)
      TS_CHECK(S[t][i] == 0, "S[{}][{}] = 1: a stage can only keep earlier nodes", t, i);
    auto& r = out.R[t];
    r[t] = 1;
    if (t + 1 < n) {
      for (int i = 0; i < t; ++i)
        r[i] = S[t + 1][i] && !S[t][i];
    }
    // Inputs come before their readers, so one pass downwards closes the set.
    for (int k = t; k >= 0; --k) {
      if (!r[k])
        continue;
      for (int j : graph.nodes[static_cast<size_t>(k)].inputs) {
        if (!S[t][j])
          r[j] = 1;
      }
    }
  }
  return out;
}

Schedule prune_schedule(const Graph& graph, const Schedule& schedule) {
  simulate_schedule(graph, schedule);
  const int n = graph.size();
  const auto& S = schedule.S;
  Schedule out;
  out.R.assign(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  out.S = out.R;
  for (int t = n - 1; t >= 0; --t) {
    auto& r = out.R[t];
    r[t] = 1;
    if (t + 1 < n) {
      // A useful keep into t+1 was held into t (then it is useful there) or computed in t.
      for (int i = 0; i <= t; ++i) {
        if (!out.S[t + 1][i])
          continue;
        if (S[t][i])
          out.S[t][i] = 1;
        else
          r[i] = 1;
      }
    }
    for (int k = t; k >= 0; --k) {
      if (!r[k])
        continue;
      for (int j : graph.nodes[static_cast<size_t>(k)].inputs) {
        if (S[t][j])
          out.S[t][j] = 1;
        else
          r[j] = 1;
      }
    }
  }
  return out;
}

Schedule keep_everything_schedule(const Graph& graph) {
  check_graph(graph);
  const int n = graph.size();
  const auto users = graph_users(graph);
  BoolMatrix S(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  for (int i = 0; i < n; ++i) {
    const int last = users[i].empty() ? i : users[i].back();
    for (int t = i + 1; t <= last; ++t)
      S[t][i] = 1;
  }
  return minimal_recompute(graph, S);
}

std::string graph_fingerprint(const Graph& graph) {
  // FNV-1a over the fields that decide a schedule; names do not.
  uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  };
  mix(graph.nodes.size());
  for (const auto& node : graph.nodes) {
    mix(std::bit_cast<uint64_t>(node.cost));
    mix(static_cast<uint64_t>(node.bytes));
    mix(node.inputs.size());
    for (int j : node.inputs)
      mix(static_cast<uint64_t>(j));
  }
  return fmt::format("{:016x}", h);
}

}  // namespace tessera::memory::remat
