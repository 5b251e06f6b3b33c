#include "plan/collectives.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

namespace {
double ring_steps(const Group& g, double bytes, double rounds) {
  if (g.size <= 1 || bytes <= 0) return 0;
  TS_CHECK(g.link.bandwidth > 0, "plan: a collective over a link without bandwidth");
  const double n = g.size;
  return rounds * (n - 1) * g.link.latency + rounds * (n - 1) / n * bytes / g.link.bandwidth;
}
}  // namespace

double all_reduce_seconds(const Group& g, double bytes) { return ring_steps(g, bytes, 2); }
double reduce_scatter_seconds(const Group& g, double bytes) { return ring_steps(g, bytes, 1); }
double all_gather_seconds(const Group& g, double bytes) { return ring_steps(g, bytes, 1); }
double all_to_all_seconds(const Group& g, double bytes) { return ring_steps(g, bytes, 1); }

double p2p_seconds(const Link& link, double bytes) {
  if (bytes <= 0) return 0;
  return link.latency + bytes / link.bandwidth;
}

Group group_on(const ClusterSpec& c, int size, int64_t stride) {
  const double eff = c.efficiency.link;
  const int64_t per_node = c.node_capacity();
  Group g;
  g.size = size;
  const int64_t span = stride * (size - 1) + 1;  // devices from the first member to the last
  if (size <= 1 || span <= per_node) {
    g.link = {c.intra_node.bandwidth * eff, c.intra_node.latency};
    return g;
  }
  // Members sharing a node: a node holds per_node/stride of them when stride < per_node.
  const int64_t members_per_node = std::max<int64_t>(1, std::min<int64_t>(size, per_node / stride));
  const double network = static_cast<double>(members_per_node) * c.inter_node.bandwidth;
  g.link = {std::min(network, c.intra_node.bandwidth) * eff, c.inter_node.latency};
  g.crosses_nodes = true;
  if (c.inter_node.busy_bandwidth > 0) {
    g.busy_bandwidth =
        std::min(static_cast<double>(members_per_node) * c.inter_node.busy_bandwidth, c.intra_node.bandwidth) * eff;
  }
  g.compute_slowdown = c.inter_node.compute_slowdown;
  return g;
}

Placement place(const Layout& l, const ClusterSpec& c) {
  Placement p;
  p.tp = group_on(c, l.tp, 1);
  p.dp = group_on(c, l.dp, l.tp);
  p.ep = group_on(c, l.ep, l.tp);
  const int64_t stage_span = int64_t{l.tp} * l.dp;  // devices of one stage
  Group pp = group_on(c, l.pp, stage_span);
  p.pp_crosses_nodes = l.pp > 1 && stage_span * l.pp > c.node_capacity();
  // A stage boundary sends over one device's link (one NIC per device) at a time.
  p.pp = p.pp_crosses_nodes ? Link{std::min(c.inter_node.bandwidth, c.intra_node.bandwidth) * c.efficiency.link, c.inter_node.latency}
                            : pp.link;
  return p;
}

}  // namespace tessera::plan
