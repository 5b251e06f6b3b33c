#pragma once
// A deterministic, layout-independent loader of training batches from a token file.
//
// Windows. A file of N tokens holds W = (N - 1) / T windows of T + 1 tokens; window w starts at
// token w·T, its first T tokens are inputs and its last T are the targets (inputs shifted by one).
// Consecutive windows share one token, so every token except a short tail is trained on.
//
// The sequence stream. Sequence c of the run (c = 0, 1, 2, ...) lies in epoch e = c / W at
// position k = c % W and reads window order_e(k): a keyed permutation of the windows, new each
// epoch (WindowOrder; or the identity when shuffle is off, e.g. for validation). The stream depends
// only on (file, T, seed): not on batch size, data-parallel size or microbatching.
//
// Batches. The global batch of a step is the next G sequences of the stream. Data-parallel rank r
// of R takes rows [r·G/R, (r+1)·G/R) (floor division: shard sizes differ by at most one when R does
// not divide G); microbatch m of M takes rows [m·S/M, (m+1)·S/M) of the rank's S rows. Whatever R
// and M, the rows of a step together are the same G sequences in the same order.
//
// State. The position is one number, the sequences consumed so far (plus the step count, and the
// stream's identity to catch a resume against other data). Saving and restoring it resumes exactly,
// even with another global batch size or layout.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <vector>

#include "data/token_file.h"

namespace tessera::data {

struct LoaderOptions {
  int64_t seq_len = 0;       // T
  int64_t global_batch = 0;  // G: sequences per step, summed over data-parallel ranks
  uint64_t seed = 0;
  bool shuffle = true;       // false: windows in file order (validation)
};

struct LoaderState {
  uint64_t sequences = 0;  // sequences of the stream consumed so far: the position
  uint64_t steps = 0;      // advance() calls so far
  // The stream's identity, checked on restore.
  uint64_t seed = 0;
  int64_t seq_len = 0;
  int64_t tokens = 0;
  bool shuffle = true;

  bool operator==(const LoaderState&) const = default;
};

// For checkpoints: every field, exactly (64-bit integers stay integers). from_json throws naming
// a missing or mistyped field.
nlohmann::json to_json(const LoaderState& state);
LoaderState loader_state_from_json(const nlohmann::json& j);

// Rows of a batch: inputs and targets, each [rows, T] row-major.
struct Batch {
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

// Row range [begin, end) of a part of a batch of `total` rows split in `parts` (floor division).
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
RowRange split_rows(int64_t total, int64_t part, int64_t parts);

class TokenLoader {
 public:
  // Throws when the file has fewer than seq_len + 1 tokens (naming both numbers).
  TokenLoader(std::shared_ptr<const TokenFile> file, LoaderOptions options);

  int64_t windows_per_epoch() const { return windows_; }
  uint64_t epoch() const { return state_.sequences / static_cast<uint64_t>(windows_); }
  uint64_t cursor() const { return state_.sequences % static_cast<uint64_t>(windows_); }  // position in epoch
  const LoaderOptions& options() const { return options_; }

  // First token of stream sequence `sequence`'s window.
  int64_t window_start(uint64_t sequence) const;

  // Rows [begin, begin + count) of the current step's global batch, into [count, T] buffers.
  void fill(int64_t begin, int64_t count, std::span<int32_t> inputs, std::span<int32_t> targets) const;
  Batch rows(int64_t begin, int64_t count) const;

  Batch global_batch() const { return rows(0, options_.global_batch); }
  // Data-parallel rank `rank` of `ranks`: its shard of the current global batch.
  Batch shard(int64_t rank, int64_t ranks) const;
  // Microbatch `micro` of `micros` of that shard.
  Batch microbatch(int64_t rank, int64_t ranks, int64_t micro, int64_t micros) const;

  // Moves to the next step (consumes G sequences).
  void advance();
  // global_batch(), then advance().
  Batch next();

  LoaderState state() const { return state_; }
  // Resumes at a saved position; throws if the state belongs to another file, seq_len, seed or
  // shuffle setting.
  void restore(const LoaderState& state);

 private:
  std::shared_ptr<const TokenFile> file_;
  LoaderOptions options_;
  int64_t windows_ = 0;
  LoaderState state_;
};

}  // namespace tessera::data
