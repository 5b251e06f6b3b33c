#include "memory/remat/op_graph.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "core/check.h"

namespace tessera::memory::remat {

namespace {

// Values of the graph: what a schedule decides to keep or drop. The rest is resident anyway.
bool is_value(const Storage* s) {
  switch (s->tag()) {
    case MemoryTag::Activations:
    case MemoryTag::Workspace:
    case MemoryTag::Comm:
      return true;
    case MemoryTag::Params:
    case MemoryTag::Grads:
    case MemoryTag::Optimizer:
    case MemoryTag::WeightStash:
    case MemoryTag::WorkingCopies:
      return false;
  }
  return false;
}

bool contains(const std::vector<const Storage*>& v, const Storage* s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

Schedule op_graph_schedule(const OpGraph& op_graph, const ChainSchedule& schedule) {
  const Graph& g = op_graph.graph;
  const int N = g.size(), n = static_cast<int>(op_graph.units.size());
  simulate(op_graph.chain, schedule);  // throws on a schedule chain.h does not run
  Schedule s;
  // The op graph's chain (OpGraph::chain) has no rebuildable part: each op is a node of its own.
  for (const std::vector<ChainOp>* phase : {&schedule.forward, &schedule.backward}) {
    for (const ChainOp& op : *phase) {
      TS_CHECK(!op.is_forward() || op.keep != Keep::Selective,
               "an op graph's chain schedule keeps no unit selectively: {}", describe(op));
    }
  }
  s.R.assign(static_cast<size_t>(N), std::vector<std::uint8_t>(static_cast<size_t>(N), 0));
  s.S = s.R;
  std::vector<std::uint8_t> resident(static_cast<size_t>(N), 0);
  int next_stage = 0;  // the first node whose stage is not open yet
  const auto open_stage = [&](int t) {
    for (int v = 0; v < t; ++v) s.S[static_cast<size_t>(t)][static_cast<size_t>(v)] = resident[static_cast<size_t>(v)];
    next_stage = t + 1;
  };
  // Nodes of no unit's ops before node t (the sources) get stages of their own.
  const auto sources_before = [&](int t) {
    for (int v = next_stage; v < t; ++v) {
      open_stage(v);
      s.R[static_cast<size_t>(v)][static_cast<size_t>(v)] = 1;
      resident[static_cast<size_t>(v)] = 1;
    }
  };
  int below = n;  // the lowest unit whose backward is done
  const auto compute = [&](int t, int v) {
    if (s.S[static_cast<size_t>(t)][static_cast<size_t>(v)] == 0) s.R[static_cast<size_t>(t)][static_cast<size_t>(v)] = 1;
    resident[static_cast<size_t>(v)] = 1;
  };
  // What survives a unit forward: its saved nodes with Keep::All, its input unless Keep::Nothing,
  // its output while the unit above still needs it.
  const auto after_forward = [&](int i, Keep keep) {
    const OpGraphUnit& u = op_graph.units[static_cast<size_t>(i)];
    for (int v = u.forward_first; v <= u.forward_last; ++v) {
      const bool saved = std::binary_search(u.saved.begin(), u.saved.end(), v);
      if (v == u.output ? i + 1 < n && i + 1 >= below : !saved || keep != Keep::All) resident[static_cast<size_t>(v)] = 0;
    }
    if (keep == Keep::Nothing) resident[static_cast<size_t>(u.input)] = 0;
  };
  for (const ChainOp& op : schedule.forward) {
    const OpGraphUnit& u = op_graph.units[static_cast<size_t>(op.unit)];
    for (int v = u.forward_first; v <= u.forward_last; ++v) {
      sources_before(v);
      open_stage(v);
      compute(v, v);
    }
    after_forward(op.unit, op.keep);
  }
  std::vector<ChainOp> pending;
  for (const ChainOp& op : schedule.backward) {
    if (op.is_forward()) {
      pending.push_back(op);
      continue;
    }
    const OpGraphUnit& u = op_graph.units[static_cast<size_t>(op.unit)];
    const int t = u.backward_first;
    sources_before(t);
    open_stage(t);
    for (const ChainOp& f : pending) {
      const OpGraphUnit& fu = op_graph.units[static_cast<size_t>(f.unit)];
      for (int v = fu.forward_first; v <= fu.forward_last; ++v) compute(t, v);
      after_forward(f.unit, f.keep);
    }
    pending.clear();
    compute(t, t);
    for (int v = t + 1; v <= u.backward_last; ++v) {
      open_stage(v);
      compute(v, v);
    }
    for (int v : u.saved) resident[static_cast<size_t>(v)] = 0;
    resident[static_cast<size_t>(u.input)] = 0;
    below = op.unit;
  }
  sources_before(N);
  return prune_schedule(g, s);
}

std::string short_op_name(const char* name) {
  const std::string_view n(name);
  const size_t colon = n.rfind("::");
  return std::string(colon == std::string_view::npos ? n : n.substr(colon + 2));
}

OpGraph op_training_graph(const OpTrace& trace, std::span<const TracedUnit> units, std::span<const double> op_costs) {
  TS_CHECK(!units.empty(), "op graph: no units");
  const int n_ops = trace.size();
  TS_CHECK(op_costs.empty() || static_cast<int>(op_costs.size()) == n_ops,
           "op graph: {} op costs for a trace of {} ops", op_costs.size(), n_ops);
  // The ranges: forwards in order, then backwards in reverse order, covering the trace.
  int next = 0;
  for (const TracedUnit& u : units) {
    TS_CHECK(u.forward_begin == next && u.forward_end >= u.forward_begin,
             "op graph: a unit's forward ops start at {}, expected {}", u.forward_begin, next);
    next = u.forward_end;
  }
  const int forward_end = next;
  for (size_t i = units.size(); i-- > 0;) {
    TS_CHECK(units[i].backward_begin == next && units[i].backward_end >= units[i].backward_begin,
             "op graph: unit {}'s backward ops start at {}, expected {}", i, units[i].backward_begin, next);
    next = units[i].backward_end;
  }
  TS_CHECK(next == n_ops, "op graph: the units' ops end at {} but the trace has {}", next, n_ops);

  OpGraph out;
  Graph& g = out.graph;
  out.node_of_op.assign(static_cast<size_t>(n_ops), -1);
  std::map<const Storage*, int> producer;  // storage -> the node of its latest version
  std::map<const Storage*, int> forward_producer;
  std::vector<int> source_nodes;
  const auto cost_of = [&](int op) { return op_costs.empty() ? trace.ops()[static_cast<size_t>(op)].seconds : op_costs[static_cast<size_t>(op)]; };

  for (int k = 0; k < n_ops; ++k) {
    const OpTrace::Op& op = trace.ops()[static_cast<size_t>(k)];
    const bool forward = k < forward_end;
    if (k == forward_end) forward_producer = producer;
    std::vector<int> inputs;
    for (const Storage* s : op.arguments) {
      if (!is_value(s)) continue;
      auto it = producer.find(s);
      if (it == producer.end()) {
        if (contains(op.written, s)) continue;  // a buffer the op only writes
        // Read before any op of the run wrote it: the run's input or the gradient from above.
        GraphNode source{forward ? "input" : "gradient", 0, forward ? static_cast<int64_t>(s->bytes()) : 0, {}};
        g.nodes.push_back(std::move(source));
        source_nodes.push_back(g.size() - 1);
        it = producer.emplace(s, g.size() - 1).first;
      }
      if (std::find(inputs.begin(), inputs.end(), it->second) == inputs.end()) inputs.push_back(it->second);
    }
    GraphNode node{short_op_name(op.name), cost_of(k), 0, std::move(inputs)};
    for (const Storage* s : op.written) {
      if (is_value(s) && forward) node.bytes += static_cast<int64_t>(s->bytes());
    }
    g.nodes.push_back(std::move(node));
    const int id = g.size() - 1;
    out.node_of_op[static_cast<size_t>(k)] = id;
    for (const Storage* s : op.written) {
      if (is_value(s)) producer[s] = id;
    }
    out.op_cost += cost_of(k);
  }
  if (forward_end == n_ops) forward_producer = producer;

  out.sources = static_cast<int>(source_nodes.size());
  out.pinned_cost = out.op_cost + 1;
  for (int s : source_nodes) g.nodes[static_cast<size_t>(s)].cost = out.pinned_cost;
  check_graph(g);

  // The units as a chain, and the saved tensors against what the backwards read.
  const auto node_of = [&](const Storage* s, const char* what, size_t unit) {
    auto it = forward_producer.find(s);
    TS_CHECK(it != forward_producer.end(), "op graph: unit {}'s {} is no value of its forward", unit, what);
    return it->second;
  };
  const std::vector<std::vector<int>> users = graph_users(g);
  for (size_t i = 0; i < units.size(); ++i) {
    const TracedUnit& u = units[i];
    const int input = node_of(u.input, "input", i);
    const int output = node_of(u.output, "output", i);
    const int first = out.node_of_op[static_cast<size_t>(u.forward_begin)];
    const int last = u.forward_end > u.forward_begin ? out.node_of_op[static_cast<size_t>(u.forward_end - 1)] : first - 1;
    const auto in_backward = [&](int node) {
      const int b = u.backward_begin < u.backward_end ? out.node_of_op[static_cast<size_t>(u.backward_begin)] : g.size();
      const int e = u.backward_begin < u.backward_end ? out.node_of_op[static_cast<size_t>(u.backward_end - 1)] : -1;
      return node >= b && node <= e;
    };
    std::set<int> read;
    for (int node = first; node <= last; ++node) {
      const auto& r = users[static_cast<size_t>(node)];
      if (std::any_of(r.begin(), r.end(), in_backward)) read.insert(node);
    }
    std::set<int> saved;
    for (const Storage* s : u.saved) {
      if (s == u.input) continue;
      saved.insert(node_of(s, "saved tensor", i));
    }
    for (int node : read) {
      TS_CHECK(saved.count(node) != 0, "op graph: unit {}'s backward reads the output of {} (node {}), which the unit "
               "did not save", i, g.nodes[static_cast<size_t>(node)].name, node);
    }
    for (int node : saved) {
      TS_CHECK(read.count(node) != 0, "op graph: unit {} saved the output of {} (node {}), which its backward does not "
               "read", i, g.nodes[static_cast<size_t>(node)].name, node);
    }
    ChainUnit c;
    c.input_bytes = g.nodes[static_cast<size_t>(input)].bytes;
    c.output_bytes = g.nodes[static_cast<size_t>(output)].bytes;
    for (int node : read) c.own_bytes += g.nodes[static_cast<size_t>(node)].bytes;
    // What the forward holds at op k besides its input, what it keeps and its output: the values it
    // made that no backward reads, from their op to their last reader in the forward.
    for (int k = first; k <= last; ++k) {
      int64_t transient = 0;
      for (int v = first; v <= k; ++v) {
        if (read.count(v) != 0 || v == output) continue;
        const auto& r = users[static_cast<size_t>(v)];
        if (v == k || std::any_of(r.begin(), r.end(), [&](int user) { return user >= k && user <= last; })) {
          transient += g.nodes[static_cast<size_t>(v)].bytes;
        }
      }
      c.forward_extra_bytes = std::max(c.forward_extra_bytes, transient);
    }
    OpGraphUnit nodes;
    nodes.input = input;
    nodes.output = output;
    nodes.forward_first = first;
    nodes.forward_last = last;
    nodes.backward_first = u.backward_begin < u.backward_end ? out.node_of_op[static_cast<size_t>(u.backward_begin)] : 0;
    nodes.backward_last = u.backward_begin < u.backward_end ? out.node_of_op[static_cast<size_t>(u.backward_end - 1)] : -1;
    nodes.saved.assign(read.begin(), read.end());
    out.units.push_back(std::move(nodes));
    for (int op = u.forward_begin; op < u.forward_end; ++op) c.forward_time += cost_of(op);
    for (int op = u.backward_begin; op < u.backward_end; ++op) c.backward_time += cost_of(op);
    out.chain.push_back(c);
  }
  return out;
}

}  // namespace tessera::memory::remat
