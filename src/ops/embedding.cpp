#include "ops/embedding.h"

#include <cstdint>

#include "kernels/cpu/embedding.h"
#include "ops/op_call.h"

namespace tessera::ops {

using detail::data_or_null;
using detail::OpCall;

namespace {
struct Lookup {
  int B, T, C, V;
};

// tokens [B, T] into a table [V, C], with an optional position table [maxT, C], maxT >= T.
Lookup check_lookup(const OpCall& call, const Tensor& tokens, const Tensor& table, const char* table_name,
                    const Tensor& positions, const char* positions_name) {
  call.rank(tokens, "tokens", 2, "[B, T]");
  call.rank(table, table_name, 2, "[V, C]");
  const int64_t B = tokens.size(0), T = tokens.size(1), V = table.size(0), C = table.size(1);
  if (positions.defined()) {
    TS_CHECK(positions.dim() == 2 && positions.size(0) >= T && positions.size(1) == C,
             "{}: {} has shape {}, expected [maxT, C={}] with maxT >= T={} (C from {}; T from tokens)", call.op(),
             positions_name, positions.shape_string(), C, T, table_name);
  }
  return {call.to_int(B, "B"), call.to_int(T, "T"), call.to_int(C, "C"), call.to_int(V, "V")};
}
}  // namespace

void embedding_forward(const Tensor& y, const Tensor& tokens, const Tensor& wte, const Tensor& wpe) {
  OpCall call("ops::embedding_forward");
  call.operands({{y, "y"}, {wte, "wte"}}).optional(wpe, "wpe").indices(tokens, "tokens");
  const Lookup s = check_lookup(call, tokens, wte, "wte", wpe, "wpe");
  call.shape(y, "y", {{"B", s.B, "tokens"}, {"T", s.T, "tokens"}, {"C", s.C, "wte"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::embedding_forward<T>(y.data<T>(), tokens.data<int32_t>(), wte.data<T>(), data_or_null<T>(wpe), s.B, s.T,
                                  s.C, s.V);
  });
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dy, const Tensor& tokens) {
  OpCall call("ops::embedding_backward");
  call.operands({{dwte, "dwte"}, {dy, "dy"}}).optional(dwpe, "dwpe").indices(tokens, "tokens");
  const Lookup s = check_lookup(call, tokens, dwte, "dwte", dwpe, "dwpe");
  call.shape(dy, "dy", {{"B", s.B, "tokens"}, {"T", s.T, "tokens"}, {"C", s.C, "dwte"}});
  // The kernel trusts the ids the forward checked; a dwte with fewer rows than the forward's wte
  // would have it write out of bounds, so the ids are checked against dwte here (one compare per
  // token, against C adds per token in the kernel).
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    TS_CHECK(ids[i] >= 0 && ids[i] < s.V, "{}: token id {} at position (b={}, t={}) is outside dwte's rows [0, {})",
             call.op(), ids[i], i / s.T, i % s.T, s.V);
  }
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::embedding_backward<T>(dwte.data<T>(), data_or_null<T>(dwpe), dy.data<T>(), ids, s.B, s.T, s.C);
  });
}

}  // namespace tessera::ops
