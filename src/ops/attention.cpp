#include "ops/attention.h"

#include <cstdint>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/rope.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::OpCall;

namespace {
struct Heads {
  int B, T, C, H, Hkv;
  int64_t kv_width() const { return int64_t{C} / H * Hkv; }  // Ckv
};

// qkv [B, T, W3], W3 = (H + 2·Hkv)·D: n_head query heads and n_kv_head key/value heads of D values.
Heads check_qkv(const OpCall& call, const Tensor& qkv, const char* name, int n_head, int n_kv_head) {
  call.rank(qkv, name, 3, "[B, T, (H + 2·Hkv)·D]");
  TS_CHECK(n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0,
           "{}: n_kv_head = {} must be a positive divisor of n_head = {}", call.op(), n_kv_head, n_head);
  const int64_t heads = int64_t{n_head} + 2 * int64_t{n_kv_head};
  TS_CHECK(qkv.size(2) > 0 && qkv.size(2) % heads == 0,
           "{}: {} has shape {}, expected [B, T, (H + 2·Hkv)·D]: its last dimension is no multiple of the {} heads of "
           "q, k and v (H = {}, Hkv = {})",
           call.op(), name, qkv.shape_string(), heads, n_head, n_kv_head);
  const int64_t C = qkv.size(2) / heads * n_head;
  return {call.to_int(qkv.size(0), "B"), call.to_int(qkv.size(1), "T"), call.to_int(C, "C"), n_head, n_kv_head};
}

int check_rope(const OpCall& call, const Heads& s, float theta, int64_t position0) {
  TS_CHECK((s.C / s.H) % 2 == 0, "{}: head size D = C/H = {}/{} must be even to rotate the pairs (i, i + D/2)",
           call.op(), s.C, s.H);
  TS_CHECK(theta > 0.0f, "{}: theta = {} must be positive", call.op(), theta);
  TS_CHECK(position0 >= 0 && position0 + s.T <= INT32_MAX, "{}: the first position {} must be in [0, {}]", call.op(),
           position0, INT32_MAX - s.T);
  return static_cast<int>(position0);
}
}  // namespace

void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head, int n_kv_head) {
  OpCall call("ops::attention_forward", ProfileCategory::Attention);
  call.operands({{out, "out"}, {qkv, "qkv"}}).accumulators({{lse, "lse"}});
  const Heads s = check_qkv(call, qkv, "qkv", n_head, n_kv_head);
  call.shape(out, "out", {{"B", s.B, "qkv"}, {"T", s.T, "qkv"}, {"C", s.C, "qkv"}});
  call.shape(lse, "lse", {{"B", s.B, "qkv"}, {"H", s.H, "n_head"}, {"T", s.T, "qkv"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::attention_forward<T>(out.data<T>(), lse.data<compute_t<T>>(), qkv.data<T>(), s.B, s.T, s.C, s.H, s.Hkv);
  });
}

void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int n_head, int n_kv_head) {
  OpCall call("ops::attention_backward", ProfileCategory::Attention);
  call.operands({{dqkv, "dqkv"}, {dout, "dout"}, {qkv, "qkv"}, {out, "out"}}).accumulators({{lse, "lse"}});
  const Heads s = check_qkv(call, qkv, "qkv", n_head, n_kv_head);
  call.same_shape(dqkv, "dqkv", qkv, "qkv");
  call.shape(out, "out", {{"B", s.B, "qkv"}, {"T", s.T, "qkv"}, {"C", s.C, "qkv"}});
  call.same_shape(dout, "dout", out, "out");
  call.shape(lse, "lse", {{"B", s.B, "qkv"}, {"H", s.H, "n_head"}, {"T", s.T, "qkv"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::attention_backward<T>(dqkv.data<T>(), dout.data<T>(), qkv.data<T>(), out.data<T>(),
                                   lse.data<compute_t<T>>(), s.B, s.T, s.C, s.H, s.Hkv);
  });
}

void attention_decode(const Tensor& out, const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv, int64_t past,
                      int n_head, int n_kv_head) {
  OpCall call("ops::attention_decode", ProfileCategory::Attention);
  call.operands({{out, "out"}, {k_cache, "k_cache"}, {v_cache, "v_cache"}, {qkv, "qkv"}});
  const Heads s = check_qkv(call, qkv, "qkv", n_head, n_kv_head);
  call.shape(out, "out", {{"B", s.B, "qkv"}, {"T", s.T, "qkv"}, {"C", s.C, "qkv"}});
  call.rank(k_cache, "k_cache", 3, "[B, S, Hkv·D]");
  call.shape(k_cache, "k_cache", {{"B", s.B, "qkv"}, {"S", k_cache.size(1), nullptr}, {"Hkv·D", s.kv_width(), "qkv"}});
  call.same_shape(v_cache, "v_cache", k_cache, "k_cache");
  const int S = call.to_int(k_cache.size(1), "S");
  TS_CHECK(past >= 0 && past + s.T <= S,
           "{}: {} cached positions (past) and {} new ones (T of qkv) do not fit k_cache's {} positions (S); "
           "start a new cache or slide the context",
           call.op(), past, s.T, S);
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::attention_decode<T>(out.data<T>(), k_cache.data<T>(), v_cache.data<T>(), qkv.data<T>(), s.B, s.T,
                                 static_cast<int>(past), S, s.C, s.H, s.Hkv);
  });
}

void rope_forward(const Tensor& y, const Tensor& x, int n_head, int n_kv_head, float theta, int64_t position0) {
  OpCall call("ops::rope_forward", ProfileCategory::Attention);
  call.operands({{y, "y"}, {x, "x"}});
  const Heads s = check_qkv(call, x, "x", n_head, n_kv_head);
  call.same_shape(y, "y", x, "x");
  const int p0 = check_rope(call, s, theta, position0);
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::rope_forward<T>(y.data<T>(), x.data<T>(), s.B, s.T, s.C, s.H, s.Hkv, theta, p0);
  });
}

void rope_backward(const Tensor& dx, const Tensor& dy, int n_head, int n_kv_head, float theta, int64_t position0) {
  OpCall call("ops::rope_backward", ProfileCategory::Attention);
  call.operands({{dx, "dx"}, {dy, "dy"}});
  const Heads s = check_qkv(call, dy, "dy", n_head, n_kv_head);
  call.same_shape(dx, "dx", dy, "dy");
  const int p0 = check_rope(call, s, theta, position0);
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::rope_backward<T>(dx.data<T>(), dy.data<T>(), s.B, s.T, s.C, s.H, s.Hkv, theta, p0);
  });
}

}  // namespace tessera::ops
