#pragma once
// A parallel layout: how one training step of a model is spread over devices. Devices are
// numbered with tp innermost, then dp, then pp (Megatron's order), so a tensor-parallel group is
// a run of neighbouring devices and, when tp divides the node size, lives inside one node.
#include <cstdint>
#include <string>
#include <string_view>

#include "config/model_config.h"
#include "plan/cluster.h"

namespace tessera::plan {

enum class Recompute {
  None,       // keep every activation backward needs
  Selective,  // recompute only the attention core (QK^T, softmax, dropout, AV): Korthikanti et al.
  Full,       // keep only each layer's input; rerun the layer's forward during backward
};

enum class PipelineSchedule {
  OneFOneB,  // 1F1B (PipeDream-Flush); interleaved 1F1B when v > 1
  GPipe,     // all forwards, then all backwards
};

struct Layout {
  int dp = 1;                   // data-parallel replicas
  int tp = 1;                   // tensor-parallel ranks (Megatron column/row split)
  int pp = 1;                   // pipeline stages
  int v = 1;                    // model chunks per stage (interleaving); 1 = not interleaved
  bool sp = false;              // sequence parallelism in the regions tp leaves replicated
  int zero = 0;                 // ZeRO stage 0..3 over the dp group
  int micro_batch = 1;          // sequences per microbatch (b)
  int64_t global_batch = 1;     // sequences per optimizer step (B)
  Recompute recompute = Recompute::None;
  Precision precision = Precision::Bf16;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  bool flash_attention = false;  // fused attention that never stores the s x s scores
  bool overlap = false;          // data-parallel / ZeRO collectives overlap backward (and ZeRO-3 gathers, forward)

  int64_t devices() const { return int64_t{dp} * tp * pp; }
  // Microbatches each pipeline runs per step: B / (dp * b).
  int64_t microbatches() const { return global_batch / (int64_t{dp} * micro_batch); }
  bool operator==(const Layout&) const = default;
};

std::string recompute_name(Recompute r);
std::string schedule_name(PipelineSchedule s);

// "tp=8,pp=2,dp=32,v=2,mb=1,zero=1,recompute=full,sp=true,precision=bf16": keys tp, pp, dp, v, mb,
// gb, zero, recompute, sp, precision, schedule, flash, overlap. Keys not given keep their value in `base`.
// Unknown keys and bad values throw with the list of known keys.
Layout parse_layout(std::string_view text, Layout base = {});
// The same syntax; parse_layout(to_string(l)) == l.
std::string to_string(const Layout& l);

// Throws tessera::Error naming the problem and the fix: device count, divisibility of heads, FFN,
// layers and batch, interleaving and ZeRO constraints.
void check_layout(const config::ModelConfig& model, const Layout& layout, int64_t devices);

}  // namespace tessera::plan
