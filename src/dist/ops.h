#pragma once
// What a communicator can do, and how many bytes each operation sends from one rank.
//
// Byte convention (the counters of every Communicator and the planner's collective models use
// it): the bytes *this rank sends* under the bandwidth-optimal ring algorithm, with N the group
// size, E the element size and c[i] the element count of rank i's chunk:
//   all_reduce      2 (N-1)/N x count x E     (ring reduce-scatter, then ring all-gather)
//   reduce_scatter  (sum(c) - c[rank]) x E    rank r forwards every partial chunk but its own;
//                                              equal chunks: (N-1)/N of the input
//   all_gather      (sum(c) - c[(rank+1)%N]) x E  rank r forwards every chunk but the one its
//                                              successor sends it last; equal: (N-1)/N of the output
//   broadcast       count x E on every rank but the last of the chain root, root+1, ..., root-1
//                   (pipelined chain); 0 on that last rank
//   all_to_all      what goes to other ranks: (sum(send_counts) - send_counts[rank]) x E
//   send            count x E;  recv, barrier, split: 0
// A group of one sends nothing. The all_reduce figure is rounded down to whole bytes.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace tessera::dist {

enum class OpKind : uint8_t { AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll, Send, Recv, Barrier, Split };
inline constexpr int kOpKinds = 9;

// Avg is a sum followed by a division by the group size; floating types only.
enum class ReduceOp : uint8_t { Sum, Max, Min, Avg };

std::string_view op_name(OpKind kind);          // "all_reduce", "reduce_scatter", ...
std::string_view reduce_op_name(ReduceOp op);   // "sum", "max", "min", "avg"

// Collectives are numbered on one series that every member of the group agrees on; send and recv
// are numbered on a second series of their own, since peers do not share it.
constexpr bool is_collective(OpKind kind) { return kind != OpKind::Send && kind != OpKind::Recv; }

// Bytes this rank sends, by the convention above. `counts` holds one chunk size per rank for
// reduce_scatter and all_gather, and this rank's per-destination send counts for all_to_all;
// `count` is the buffer size for all_reduce, broadcast and send. `root` is used by broadcast only.
uint64_t all_reduce_bytes(size_t count, size_t elem_size, int group_size);
uint64_t reduce_scatter_bytes(std::span<const size_t> counts, size_t elem_size, int rank);
uint64_t all_gather_bytes(std::span<const size_t> counts, size_t elem_size, int rank);
uint64_t broadcast_bytes(size_t count, size_t elem_size, int rank, int group_size, int root);
uint64_t all_to_all_bytes(std::span<const size_t> send_counts, size_t elem_size, int rank);

}  // namespace tessera::dist
