#pragma once
// Communicator: a group of ranks and the collective and point-to-point operations among them, in
// the style of PyTorch's c10d ProcessGroup. Backends implement the interface (MPI on CPU now; a
// GPU backend later behind the same calls). Sub-groups (data-parallel, tensor-parallel, ...) are
// made by split() from a parent, collectively; the Mesh (dist/mesh.h) makes them all at once.
//
// Rules of use:
//  - Every call returns at once with a Work handle; the operation runs on the communicator's own
//    progress thread, so it advances while the caller computes. wait() before touching buffers.
//  - Operations start in the order they are called. Every member must call the collectives of a
//    communicator in the same order with matching arguments (as MPI and NCCL require); call one
//    communicator from one thread. Different communicators are independent.
//  - Buffers are (pointer, element count, DType); counts are elements, never bytes. Every dtype
//    can be moved; reductions take F32, BF16, F16 (summed in f32, rounded per step), I32, I8, U8.
//  - Collectives are numbered 0, 1, 2, ... on every member alike (Work::seq); send/recv have a
//    series of their own. With CommOptions::check_sequence every collective first compares
//    (sequence number, operation, dtype, count, root, reduce op) across the group and fails on
//    every member, naming each rank's call, when they differ: a desynchronized program gets an
//    error instead of a hang or a wrong sum.
//  - A watchdog (dist/watchdog.h) aborts the whole job when an operation does not finish within
//    CommOptions::timeout_seconds, printing the rank, operation, sequence number and group.
//  - Each communicator counts its operations and the bytes it sends (convention: dist/ops.h).
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "dist/ops.h"
#include "dist/work.h"

namespace tessera::dist {

struct CommOptions {
  // An operation running longer than this aborts the job (the watchdog). Generous by default:
  // the first collectives of a run may wait for slow ranks to load data or build models.
  double timeout_seconds = 600.0;
  // Verify, before each collective, that every member is calling the same one (see above). Costs a
  // small all-gather per collective; meant for tests and debugging.
  bool check_sequence = false;
  // Longest pause of the progress thread between polls of operations in flight. Shorter polls
  // finish transfers sooner; longer ones leave more CPU to the computation they overlap.
  int max_poll_interval_us = 100;
};

struct OpCounter {
  uint64_t ops = 0;
  uint64_t bytes_sent = 0;
};

// Counted when an operation is posted.
struct CommStats {
  uint64_t collectives = 0;                 // operations on the collective series
  uint64_t point_to_point = 0;              // sends and receives
  uint64_t bytes_sent = 0;                  // all operations
  std::array<OpCounter, kOpKinds> by_op{};  // indexed by OpKind

  const OpCounter& of(OpKind kind) const { return by_op[static_cast<size_t>(kind)]; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // World ranks of the members, in this communicator's rank order.
  virtual const std::vector<int>& group_ranks() const = 0;
  virtual const std::string& name() const = 0;   // "world", "dp", "tp", ... used in messages
  virtual CommStats stats() const = 0;
  virtual const CommOptions& options() const = 0;

  // In place over `count` elements of `data`.
  virtual WorkPtr all_reduce(void* data, size_t count, DType dtype, ReduceOp op) = 0;

  // `input` holds sum(counts) elements, rank i's chunk at offset counts[0] + ... + counts[i-1];
  // `output` receives this rank's reduced chunk (counts[rank] elements). `output` may be disjoint
  // from `input`, or be exactly this rank's chunk inside it (in place).
  virtual WorkPtr reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                 ReduceOp op) = 0;

  // `input` holds counts[rank] elements; `output` receives sum(counts), rank i's at its offset.
  // `input` may be disjoint from `output`, or be exactly this rank's chunk inside it (in place).
  virtual WorkPtr all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype) = 0;

  // `count` elements from `root` (a rank of this communicator) to every member.
  virtual WorkPtr broadcast(void* data, size_t count, DType dtype, int root) = 0;

  // Rank r sends send_counts[j] elements to rank j (taken from `input` in rank order) and receives
  // recv_counts[j] elements from rank j (placed in `output` in rank order). Disjoint buffers.
  virtual WorkPtr all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                             std::span<const size_t> recv_counts, DType dtype) = 0;

  // Point to point; `peer` is a rank of this communicator. Posted sends and receives progress
  // together, so two ranks may each post a send to the other before their receives. `label` says
  // what the transfer is for ("pipeline stage 1: recv activation mb3 ..."): the watchdog names it
  // when the transfer is late.
  virtual WorkPtr send(const void* data, size_t count, DType dtype, int peer, int tag = 0, std::string label = {}) = 0;
  virtual WorkPtr recv(void* data, size_t count, DType dtype, int peer, int tag = 0, std::string label = {}) = 0;

  virtual WorkPtr barrier() = 0;

  // Collective over this communicator: members with the same `color` form a new communicator,
  // ordered by `key` (ties by rank here). A negative color joins no group and gets nullptr.
  // The child shares this communicator's watchdog and options.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  // ---- conveniences over the calls above ----

  // Collective: `groups` lists every group as ranks of this communicator (the same list on every
  // member, e.g. from rank_groups() in dist/rank_groups.h). Each member gets the communicator of
  // the group holding it, ranked in list order; members in no group get nullptr.
  std::unique_ptr<Communicator> split_groups(const std::vector<std::vector<int>>& groups, const std::string& name);

  // Equal chunks of `count_per_rank` elements.
  WorkPtr reduce_scatter(const void* input, void* output, size_t count_per_rank, DType dtype, ReduceOp op);
  WorkPtr all_gather(const void* input, void* output, size_t count_per_rank, DType dtype);
  WorkPtr all_to_all(const void* input, void* output, size_t count_per_rank, DType dtype);

  // Typed spans: the dtype comes from the element type.
  template <class T>
  WorkPtr all_reduce(std::span<T> data, ReduceOp op) {
    return all_reduce(data.data(), data.size(), dtype_of<T>(), op);
  }
  template <class T>
  WorkPtr broadcast(std::span<T> data, int root) {
    return broadcast(data.data(), data.size(), dtype_of<T>(), root);
  }
  template <class T>
  WorkPtr send(std::span<T> data, int peer, int tag = 0) {  // T may be const
    return send(data.data(), data.size(), dtype_of<std::remove_const_t<T>>(), peer, tag);
  }
  template <class T>
  WorkPtr recv(std::span<T> data, int peer, int tag = 0) {
    return recv(data.data(), data.size(), dtype_of<T>(), peer, tag);
  }

  // A contiguous tensor, whole.
  WorkPtr all_reduce(const Tensor& t, ReduceOp op);
  WorkPtr broadcast(const Tensor& t, int root);

  // One line for logs: "dp: rank 1 of 2 (group ranks 1,3)".
  std::string describe() const;
};

// Offsets of each rank's chunk: prefix sums of counts (size counts.size() + 1).
std::vector<size_t> chunk_offsets(std::span<const size_t> counts);

// "0,1,2,3"
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace tessera::dist
