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
  OpCall call("ops::embedding_forward", ProfileCategory::Embedding);
  call.operands({{y, "y"}, {wte, "wte"}}).optional(wpe, "wpe").indices(tokens, "tokens");
  const Lookup s = check_lookup(call, tokens, wte, "wte", wpe, "wpe");
  call.shape(y, "y", {{"B", s.B, "tokens"}, {"T", s.T, "tokens"}, {"C", s.C, "wte"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::embedding_forward<T>(y.data<T>(), tokens.data<int32_t>(), wte.data<T>(), data_or_null<T>(wpe), s.B, s.T,
                                  s.C, s.V);
  });
}

void embedding_backward(const Tensor& dwte, const Tensor& dwpe, const Tensor& dy, const Tensor& tokens) {
  OpCall call("ops::embedding_backward", ProfileCategory::Embedding);
  call.operands({{dy, "dy"}})
      .accumulators({{dwte, "dwte"}})
      .optional_accumulator(dwpe, "dwpe")
      .indices(tokens, "tokens");
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
    kernels::embedding_backward<T>(dwte.data<compute_t<T>>(), data_or_null<compute_t<T>>(dwpe), dy.data<T>(), ids, s.B,
                                   s.T, s.C);
  });
}

void embedding_rows_forward(const Tensor& y, const Tensor& tokens, const Tensor& table, int64_t first_row,
                            int64_t vocab) {
  OpCall call("ops::embedding_rows_forward", ProfileCategory::Embedding);
  call.operands({{y, "y"}, {table, "table"}}).indices(tokens, "tokens");
  const Lookup s = check_lookup(call, tokens, table, "table", Tensor(), "");
  call.shape(y, "y", {{"B", s.B, "tokens"}, {"T", s.T, "tokens"}, {"C", s.C, "table"}});
  TS_CHECK(first_row >= 0 && vocab > 0, "{}: rows {}..{} of a vocabulary of {}", call.op(), first_row,
           first_row + s.V, vocab);
  const int32_t* ids = tokens.data<int32_t>();
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    TS_CHECK(ids[i] >= 0 && ids[i] < vocab,
             "embedding: token id {} at position (b={}, t={}) is outside the vocabulary [0, {}); the data was "
             "tokenized with a different vocabulary than the model's vocab_size",
             ids[i], i / s.T, i % s.T, vocab);
  }
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::embedding_rows_forward<T>(y.data<T>(), ids, table.data<T>(), s.B, s.T, s.C,
                                       call.to_int(first_row, "first_row"), s.V);
  });
}

void embedding_rows_backward(const Tensor& dtable, const Tensor& dy, const Tensor& tokens, int64_t first_row) {
  OpCall call("ops::embedding_rows_backward", ProfileCategory::Embedding);
  call.operands({{dy, "dy"}}).accumulators({{dtable, "dtable"}}).indices(tokens, "tokens");
  const Lookup s = check_lookup(call, tokens, dtable, "dtable", Tensor(), "");
  call.shape(dy, "dy", {{"B", s.B, "tokens"}, {"T", s.T, "tokens"}, {"C", s.C, "dtable"}});
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::embedding_rows_backward<T>(dtable.data<compute_t<T>>(), dy.data<T>(), tokens.data<int32_t>(), s.B, s.T,
                                        s.C, call.to_int(first_row, "first_row"), s.V);
  });
}

namespace {
// y or dy [B, T, C] against a position table [maxT, C], maxT >= T.
void check_positions(const OpCall& call, const Tensor& x, const char* x_name, const Tensor& table,
                     const char* table_name) {
  call.rank(x, x_name, 3, "[B, T, C]");
  call.rank(table, table_name, 2, "[maxT, C]");
  TS_CHECK(table.size(0) >= x.size(1) && table.size(1) == x.size(2),
           "{}: {} has shape {}, expected [maxT, C={}] with maxT >= T={} (from {})", call.op(), table_name,
           table.shape_string(), x.size(2), x.size(1), x_name);
}
}  // namespace

void positions_forward(const Tensor& y, const Tensor& wpe) {
  OpCall call("ops::positions_forward", ProfileCategory::Embedding);
  call.operands({{y, "y"}, {wpe, "wpe"}});
  check_positions(call, y, "y", wpe, "wpe");
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::positions_forward<T>(y.data<T>(), wpe.data<T>(), call.to_int(y.size(0), "B"), call.to_int(y.size(1), "T"),
                                  call.to_int(y.size(2), "C"));
  });
}

void positions_backward(const Tensor& dwpe, const Tensor& dy) {
  OpCall call("ops::positions_backward", ProfileCategory::Embedding);
  call.operands({{dy, "dy"}}).accumulators({{dwpe, "dwpe"}});
  check_positions(call, dy, "dy", dwpe, "dwpe");
  call.dispatch([&]<class T>(Cpu<T>) {
    kernels::positions_backward<T>(dwpe.data<compute_t<T>>(), dy.data<T>(), call.to_int(dy.size(0), "B"),
                                   call.to_int(dy.size(1), "T"), call.to_int(dy.size(2), "C"));
  });
}

}  // namespace tessera::ops
