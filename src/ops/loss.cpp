#include "ops/loss.h"

#include "kernels/cpu/cross_entropy.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

namespace {
struct Rows {
  int N, V;
};

Rows check_loss(const OpCall& call, const Tensor& logits, const char* logits_name, const Tensor& losses,
                const Tensor& targets) {
  const int64_t V = call.last_dim(logits, logits_name, "V");
  TS_CHECK(V > 0, "{}: {} has shape {}, an empty vocabulary (V = 0)", call.op(), logits_name, logits.shape_string());
  const int64_t N = call.rows(logits, logits_name, {"V", V, nullptr});
  call.per_row(losses, "losses", logits, logits_name);
  call.per_row(targets, "targets", logits, logits_name);
  return {call.to_int(N, "N (rows)"), call.to_int(V, "V")};
}
}  // namespace

double cross_entropy_forward_backward(const Tensor& logits_inout, const Tensor& losses, const Tensor& targets,
                                      int ignore_index, float grad_scale) {
  OpCall call("ops::cross_entropy_forward_backward", ProfileCategory::Loss);
  call.operands({{logits_inout, "logits_inout"}}).accumulators({{losses, "losses"}}).indices(targets, "targets");
  const Rows s = check_loss(call, logits_inout, "logits_inout", losses, targets);
  return call.dispatch([&]<class T>(Cpu<T>) {
    return kernels::cross_entropy_forward_backward<T>(logits_inout.data<T>(), losses.data<compute_t<T>>(),
                                                      targets.data<int32_t>(), s.N, s.V, ignore_index,
                                                      static_cast<compute_t<T>>(grad_scale));
  });
}

double cross_entropy_forward(const Tensor& losses, const Tensor& logits, const Tensor& targets, int ignore_index,
                             int64_t* count) {
  OpCall call("ops::cross_entropy_forward", ProfileCategory::Loss);
  call.operands({{logits, "logits"}}).accumulators({{losses, "losses"}}).indices(targets, "targets");
  const Rows s = check_loss(call, logits, "logits", losses, targets);
  return call.dispatch([&]<class T>(Cpu<T>) {
    return kernels::cross_entropy_forward<T>(losses.data<compute_t<T>>(), logits.data<T>(), targets.data<int32_t>(),
                                             s.N, s.V, ignore_index, count);
  });
}

double vocab_parallel_cross_entropy(const Tensor& logits_inout, const Tensor& losses, const Tensor& targets,
                                    int ignore_index, float grad_scale, const VocabBlock& block,
                                    const VocabReductions& reductions) {
  OpCall call("ops::vocab_parallel_cross_entropy", ProfileCategory::Loss);
  call.operands({{logits_inout, "logits_inout"}}).accumulators({{losses, "losses"}}).indices(targets, "targets");
  const Rows s = check_loss(call, logits_inout, "logits_inout", losses, targets);
  TS_CHECK(block.first >= 0 && block.real >= 0 && block.real <= s.V && block.vocab > 0,
           "{}: a block of {} columns holding classes {}..{} of {} real ones of a vocabulary of {}", call.op(), s.V,
           block.first, block.first + s.V, block.real, block.vocab);
  return call.dispatch([&]<class T>(Cpu<T>) {
    // The per-row values combined over ranks are compute_t<T>: f32 for every dtype dispatched here.
    kernels::RowReduce<compute_t<T>> max_over, sum_over;
    if (reductions.max) max_over = [&](float* v, int n) { reductions.max({v, static_cast<size_t>(n)}); };
    if (reductions.sum) sum_over = [&](float* v, int n) { reductions.sum({v, static_cast<size_t>(n)}); };
    return kernels::vocab_parallel_cross_entropy<T>(
        logits_inout.data<T>(), losses.data<compute_t<T>>(), targets.data<int32_t>(), s.N, s.V,
        call.to_int(block.real, "real"), call.to_int(block.first, "first"), call.to_int(block.vocab, "vocab"),
        ignore_index, static_cast<compute_t<T>>(grad_scale), max_over, sum_over);
  });
}

}  // namespace tessera::ops
