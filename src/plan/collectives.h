#pragma once
// Alpha-beta costs of ring collectives and point-to-point transfers, and which link each
// parallel group of a layout runs over.
#include <cstdint>

#include "plan/cluster.h"
#include "plan/layout.h"

namespace tessera::plan {

// A link as collectives see it: the bandwidth one device achieves in one direction (nominal times
// the link efficiency) and the latency of one hop.
struct Link {
  double bandwidth = 0;  // bytes/s
  double latency = 0;    // seconds
};

struct Group {
  int size = 1;
  Link link;
  bool crosses_nodes = false;  // its members are on several nodes: it runs over the network
  // Over the network while the members compute (LinkSpec's busy figures): the bandwidth (0: as
  // link's) and the compute's slowdown meanwhile.
  double busy_bandwidth = 0;
  double compute_slowdown = 1;
};

// Ring algorithms over n members, S the full buffer in bytes, alpha latency, beta = 1/bandwidth:
//   all-reduce:      2 (n - 1) alpha + 2 (n - 1)/n S beta
//   reduce-scatter:    (n - 1) alpha +   (n - 1)/n S beta   (S: the unsharded buffer)
//   all-gather:        (n - 1) alpha +   (n - 1)/n S beta   (S: the gathered buffer)
//   all-to-all:        (n - 1) alpha +   (n - 1)/n S beta   (S: the rank's whole send buffer, pairwise)
//   point-to-point:          alpha +             S beta
double all_reduce_seconds(const Group& g, double bytes);
double reduce_scatter_seconds(const Group& g, double bytes);
double all_gather_seconds(const Group& g, double bytes);
double all_to_all_seconds(const Group& g, double bytes);
double p2p_seconds(const Link& link, double bytes);

// Groups of a layout on a cluster (devices numbered tp fastest, then dp, then pp). A group inside
// one node rings over the intra-node link. A group across nodes with k members per node rings
// over the network with k NICs in parallel (one per member, as NCCL's rail-aligned rings do),
// capped by the intra-node link: bandwidth min(intra, k x inter), latency of the network.
struct Placement {
  Group tp;
  Group dp;
  Group ep;            // expert parallelism: ep consecutive data-parallel ranks
  Link pp;             // between neighbouring stages
  bool pp_crosses_nodes = false;
};
Placement place(const Layout& l, const ClusterSpec& c);

// The link of a group of `size` members at `stride` devices apart.
Group group_on(const ClusterSpec& c, int size, int64_t stride);

}  // namespace tessera::plan
