#pragma once
// 8-bit AdamW (Dettmers et al. 2022, "8-bit Optimizers via Block-wise Quantization"): m and v are
// stored as 8-bit codes (optim/quantization.h) scaled by the absmax of their block, so the state
// is 2 bytes per element plus 8 bytes per block. Each step dequantizes, applies AdamW's update
// (decoupled weight decay on matrices) with the full-precision new moments, and quantizes them
// again with the new blocks' absmax. As bitsandbytes does, embeddings (nn::ParameterPart::Embedding: their rare
// tokens' rows are what 8 bits lose) and tensors under 4096 elements keep 32-bit moments and
// AdamW's own kernel.
//
// Blocks follow the parameter's element index: block b holds elements [b·B, (b+1)·B) of its
// parameter, whatever the sharding. Under ZeRO a shard boundary can cut a block; each rank holding
// part of it keeps the block's absmax, and the new absmax is the MAXIMUM of the parts' absmax over
// the shards (optim/tensor_statistics.h), so every element is quantized with the same scale as in
// the unsharded optimizer and the sharded run equals it bit for bit.
#include "optim/optimizer.h"
#include "optim/optimizer_config.h"
#include "optim/quantization.h"
#include "optim/tensor_statistics.h"

namespace tessera::optim {

class Adam8bit final : public Optimizer {
 public:
  static constexpr int64_t kMinQuantizedSize = 4096;

  Adam8bit(MemoryAccountant& memory, const OptimizerConfig& config, const nn::ParameterStore& store,
           std::span<const Segment> layout, const ShardReduction* reduction);

  std::string_view name() const override { return optimizer_name(OptimizerKind::Adam8bit); }
  void step(float lr, std::span<const Segment> segments) override;
  // "m8", "v8" (U8): the quantized segments' codes; "m_absmax", "v_absmax": the scales of the
  // blocks they touch; "m", "v": the 32-bit segments' moments.
  StateDict state_dict() override;
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return step_; }
  int64_t owned_elements() const override { return owned_; }

  // Whether a parameter's moments are quantized (not an embedding, at least kMinQuantizedSize).
  static bool quantized(const nn::Parameter& p);
  // The blocks of `block_size` that elements [begin, end) of a parameter touch.
  static int64_t blocks_touched(int64_t begin, int64_t end, int64_t block_size);
  const std::vector<float>& signed_codebook() const { return signed_code_; }
  const std::vector<float>& unsigned_codebook() const { return unsigned_code_; }

 private:
  OptimizerConfig config_;
  const ShardReduction* reduction_;
  std::vector<Segment> layout_;
  int64_t owned_ = 0;
  std::vector<float> signed_code_, unsigned_code_;
  std::vector<int64_t> max_at_;  // [parameter id]: its first block in the maxima table (+ the end)
  Tensor m8_, v8_, m_absmax_, v_absmax_, m_, v_;
  std::vector<int64_t> q_at_, block_at_, f_at_;  // each segment's first entry in the codes, scales, 32-bit moments
  int64_t step_ = 0;
};

}  // namespace tessera::optim
