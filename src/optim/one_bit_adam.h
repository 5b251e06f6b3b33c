#pragma once
// 1-bit Adam (Tang et al. 2021): Adam whose data-parallel exchange, after a warm-up, is its
// momentum in one bit per element. An optimizer that owns its communication:
//
//   warm-up   steps 1 .. optim.freeze_step: AdamW exactly as optim/adamw.h (bias-corrected), on the
//             gradient the data-parallel reducer has summed densely.
//   then      the second moment v is frozen (Adam's variance settles early, so what remains is a
//             momentum method with a fixed preconditioner), the reducer stops reducing, and
//               m_r = β1 m + (1 − β1) R g_r        g_r this rank's gradient, R g_r its local-batch mean
//             is averaged over the R ranks in one bit per element with error feedback, in two
//             stages (the paper's compressed all-reduce): every rank sends chunk k of
//             C(m_r + e_r) to rank k (all-to-all) and keeps e_r ← m_r + e_r − C(m_r + e_r); rank k
//             averages its chunk, compresses the average with its own server error s_k the same
//             way, and the chunks are all-gathered. Every rank then holds the same m and applies
//               p ← p − lr (m / (1 − β1^t)) / (sqrt(v / (1 − β2^T)) + eps) − lr wd p (matrices),
//             with T = optim.freeze_step.
//
// C is the sign of each element and one scale per 512 elements (ops::sign_compress).
// Bytes this rank sends per compressed step: the all-to-all of the other ranks' chunks and the
// all-gather, each about (R − 1)/R of n/8 bytes of signs and n/128 bytes of scales, so ~4.9 % of a
// dense f32 all-reduce's 2 (R − 1)/R · 4n, whatever R (one_bit_adam_wire_bytes; the communicator's
// counters show exactly that).
//
// make_optimizer (optim/make_optimizer.h) builds it, given the groups it exchanges over.
//
// Every rank holds the whole momentum (the run config refuses ZeRO), the same m and v after every
// step, and its own worker error e_r and server error s_k, which checkpoints keep per rank
// (state()).
//
// Under expert parallelism an expert's momentum is averaged over the ranks that hold the expert
// (its expert-data-parallel group), the dense parameters' over the data-parallel group: each
// segment belongs to one of several exchanges, each with its own group, chunks and server error,
// and R in R g_r is that group's size.
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "dist/communicator.h"
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/rank_local_state.h"

namespace tessera::optim {

class OneBitAdam final : public Optimizer, public RankLocalState {
 public:
  // Over `owned_elements` (the segments every step passes, whole parameters), averaging over
  // `group` (nullptr or one rank: the compression still runs, over one member).
  OneBitAdam(MemoryAccountant& memory, const OptimizerConfig& config, int64_t owned_elements,
             dist::Communicator* group);
  // Over `layout` (the segments every step passes), segment i's momentum averaged over
  // groups[exchange_of[i]].
  OneBitAdam(MemoryAccountant& memory, const OptimizerConfig& config, std::span<const Segment> layout,
             std::vector<dist::Communicator*> groups, std::vector<int> exchange_of);

  std::string_view name() const override { return optimizer_name(OptimizerKind::OneBitAdam); }
  void step(float lr, std::span<const Segment> segments) override;
  // "m", "v": [owned elements], the same on every rank.
  StateDict state_dict() override;
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return m_.numel(); }

  // Whether the next step is compressed: its gradient must then stay this rank's own (unreduced).
  bool next_step_compressed() const { return step_ >= freeze_step_; }
  // RankLocalState: this rank's own errors, the worker error [owned elements] and the server error
  // of its chunk; the step is the optimizer's (restored from the manifest), so it is only checked.
  std::string_view rank_state_owner() const override { return name(); }
  // "onebit_adam.worker_error", then each exchange's server error: "onebit_adam.server_error" for
  // the first, "onebit_adam.exchange<x>.server_error" for the others.
  std::vector<std::pair<std::string, Tensor>> rank_state_tensors() override;
  int64_t rank_state_step() const override { return step_; }
  void set_rank_state_step(int64_t step) override;

 private:
  // One group's average of the momentum elements of its segments.
  struct Exchange {
    dist::Communicator* group = nullptr;
    int ranks = 1;
    int rank = 0;
    std::vector<std::pair<int64_t, int64_t>> runs;  // [begin, end) of the owned elements it averages
    int64_t elements = 0;
    std::vector<size_t> chunk_begin;  // [ranks + 1]: chunk k is elements [chunk_begin[k], chunk_begin[k + 1])
    Tensor server_error;              // [elements of this rank's chunk]
  };
  void set_up(MemoryAccountant& memory, int64_t owned_elements, std::vector<Exchange> exchanges);
  // The exchange's elements of m, averaged in place with the worker error of the same elements.
  void compressed_average(Exchange& x, std::span<float> m);

  OptimizerConfig config_;
  int64_t freeze_step_ = 0;
  std::vector<Exchange> exchanges_;
  std::vector<int> exchange_of_;  // per segment of a step; empty: every segment is exchange 0's
  Tensor m_;             // [owned elements]
  Tensor v_;             // [owned elements], frozen after freeze_step
  Tensor worker_error_;  // [owned elements]
  int64_t step_ = 0;
};

// The chunks of n elements over `ranks`, on 512-element block boundaries (ranks + 1 offsets).
std::vector<size_t> one_bit_adam_chunks(size_t elements, int ranks);
// Bytes `rank` sends in one compressed step over `ranks` for `elements` owned elements.
uint64_t one_bit_adam_wire_bytes(size_t elements, int ranks, int rank);

}  // namespace tessera::optim
