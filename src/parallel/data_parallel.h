#pragma once
// Data parallelism and ZeRO stages 1–3 as a transform of a model that contains no parallel code:
// the model calls ExecutionHooks around each unit (nn/execution_hooks.h) and this class acts there.
//
// One training step, as the trainer drives it:
//   begin_step()                               zero the gradients (full buffer, or the shard)
//   for each microbatch m of M:
//     begin_microbatch(m, M); forward; backward; end_microbatch()
//                                              buckets are reduced during backward (see
//                                              gradient_reducer.h); ZeRO-3 gathers each unit's
//                                              parameters around it (parameter_gatherer.h)
//   clip_grad_norm(max)                        the true global norm (sharded: each rank's sum of
//                                              squares, summed over the ranks)
//   optimizer_step(lr)                         AdamW on the owned shard; ZeRO-1/2 all-gather the
//                                              updated parameters
//
// What each rank holds (fp32 with Adam, Ψ parameters, N ranks, shard = ⌊Ψ/N⌋ or ⌈Ψ/N⌉ elements;
// formulas in zero_memory.h, checked by tests/parallel):
//   stage 0: params 4Ψ, grads 4Ψ, optimizer 8Ψ                    = 16Ψ
//   stage 1: params 4Ψ, grads 4Ψ, optimizer 8 shard               = 8Ψ + 8Ψ/N
//   stage 2: params 4Ψ, grads 4 shard, optimizer 8 shard          = 4Ψ + 12Ψ/N
//   stage 3: params 4 shard, grads 4 shard, optimizer 8 shard     = 16Ψ/N
// plus transient 'comm' buffers (gradient buckets in stages 2–3, gathered units in stage 3).
//
// The model is built whole on every rank (same seed, same values) and then sharded here, so
// construction briefly holds the full parameters and gradients.
#include <memory>
#include <optional>

#include "dist/communicator.h"
#include "nn/parameters.h"
#include "optim/adamw.h"
#include "parallel/gradient_reducer.h"
#include "parallel/parameter_gatherer.h"
#include "parallel/shard_layout.h"

namespace tessera::parallel {

struct DataParallelOptions {
  int zero_stage = 0;
  int64_t bucket_bytes = int64_t{25} << 20;  // gradient bucket size (PyTorch DDP's default)
};

class DataParallel final : public nn::ExecutionHooks {
 public:
  // `comm` is the data-parallel group (nullptr: one process). Every member calls this with the
  // same model and options. The model's parameters must be initialized.
  DataParallel(nn::ParameterStore& params, const std::vector<nn::Unit>& units, dist::Communicator* comm,
               MemoryAccountant& memory, const DataParallelOptions& options, const optim::AdamWConfig& adam);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int rank() const { return rank_; }
  int ranks() const { return layout_.ranks(); }
  int zero_stage() const { return options_.zero_stage; }
  dist::Communicator* comm() const { return comm_; }
  const ShardLayout& layout() const { return layout_; }
  nn::ParamRange owned() const { return optimizer_.owned(); }
  optim::AdamW& optimizer() { return optimizer_; }
  const optim::AdamW& optimizer() const { return optimizer_; }
  const std::vector<Bucket>& buckets() const { return reducer_->buckets(); }
  // Upper bound of live 'comm' bytes during a step (bucket storage and gathered parameters).
  size_t comm_bound_bytes() const;

  void begin_step();
  void begin_microbatch(int micro, int micros);
  void end_microbatch();
  // Before running the model for evaluation (forward only) with these hooks.
  void begin_evaluation();
  // The global 2-norm of the gradient; scales the gradients by max_norm / (norm + 1e-6) when that
  // is below 1 and max_norm > 0 (PyTorch's clip_grad_norm_). Collective when sharded.
  double clip_grad_norm(double max_norm);
  void optimizer_step(float lr);

  // Every parameter readable through the Parameter views until the handle goes away (ZeRO-3
  // gathers them into a transient buffer; other stages hold them already). Collective.
  class FullParameters {
   public:
    explicit FullParameters(std::optional<ParameterGatherer::Full> full) : full_(std::move(full)) {}
    // After the values were overwritten (a loaded checkpoint): keep this rank's part (ZeRO-3).
    void write_back() {
      if (full_) full_->write_back();
    }

   private:
    std::optional<ParameterGatherer::Full> full_;
  };
  FullParameters full_parameters();

  // ExecutionHooks
  void before_forward(int unit) override;
  void after_forward(int unit) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

 private:
  float* values_of_owned();
  float* grads_of_owned();

  nn::ParameterStore& params_;
  dist::Communicator* comm_;
  DataParallelOptions options_;
  int rank_;
  ShardLayout layout_;
  optim::AdamW optimizer_;
  Tensor grad_shard_;  // stages 2 and 3: [shard size], tag grads
  std::unique_ptr<ParameterGatherer> gatherer_;  // stage 3
  std::unique_ptr<GradientReducer> reducer_;
};

}  // namespace tessera::parallel
