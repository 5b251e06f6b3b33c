#include "dist/ops.h"

#include <numeric>

namespace tessera::dist {

std::string_view op_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::AllGather: return "all_gather";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::Barrier: return "barrier";
    case OpKind::Split: return "split";
  }
  return "unknown";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    case ReduceOp::Avg: return "avg";
  }
  return "unknown";
}

namespace {
uint64_t total(std::span<const size_t> counts) { return std::accumulate(counts.begin(), counts.end(), uint64_t{0}); }
}  // namespace

uint64_t all_reduce_bytes(size_t count, size_t elem_size, int group_size) {
  const auto n = static_cast<uint64_t>(group_size);
  if (n <= 1) return 0;
  return 2 * (n - 1) * static_cast<uint64_t>(count) * elem_size / n;
}

uint64_t reduce_scatter_bytes(std::span<const size_t> counts, size_t elem_size, int rank) {
  if (counts.size() <= 1) return 0;
  return (total(counts) - counts[static_cast<size_t>(rank)]) * elem_size;
}

uint64_t all_gather_bytes(std::span<const size_t> counts, size_t elem_size, int rank) {
  if (counts.size() <= 1) return 0;
  const size_t successor = (static_cast<size_t>(rank) + 1) % counts.size();
  return (total(counts) - counts[successor]) * elem_size;
}

uint64_t broadcast_bytes(size_t count, size_t elem_size, int rank, int group_size, int root) {
  if (group_size <= 1) return 0;
  const int last = (root + group_size - 1) % group_size;
  return rank == last ? 0 : static_cast<uint64_t>(count) * elem_size;
}

uint64_t all_to_all_bytes(std::span<const size_t> send_counts, size_t elem_size, int rank) {
  if (send_counts.size() <= 1) return 0;
  return (total(send_counts) - send_counts[static_cast<size_t>(rank)]) * elem_size;
}

}  // namespace tessera::dist
