#include "core/op_trace.h"

#include <algorithm>
#include <string_view>

#include "core/check.h"

namespace tessera {

namespace {
// See current_op_trace() in the header for why this is a thread-local.
thread_local OpTrace* g_current_op_trace = nullptr;

uint64_t hash_bytes(const Tensor& t) {
  return std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(t.raw()), t.nbytes()));
}
}  // namespace

OpTrace* current_op_trace() { return g_current_op_trace; }

OpTraceInstall::OpTraceInstall(OpTrace* trace) : previous_(g_current_op_trace) { g_current_op_trace = trace; }
OpTraceInstall::~OpTraceInstall() { g_current_op_trace = previous_; }

void OpTrace::begin(const char* name) {
  // An op that threw before its kernel leaves its arguments here; the next op starts afresh.
  pending_.clear();
  pending_name_ = name;
}

void OpTrace::argument(const Tensor& tensor) {
  if (!tensor.defined()) return;
  pending_.push_back({tensor.storage(), tensor, 0});
}

void OpTrace::kernel_begin() {
  for (Pending& p : pending_) p.hash_before = hash_bytes(p.tensor);
  start_ = std::chrono::steady_clock::now();
}

void OpTrace::kernel_end() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  TS_CHECK(pending_name_ != nullptr, "op trace: a kernel ended that no op began");
  Op op{pending_name_, {}, {}, seconds};
  for (const Pending& p : pending_) {
    const Storage* s = p.storage.get();
    const bool changed = hash_bytes(p.tensor) != p.hash_before;
    if (std::find(op.arguments.begin(), op.arguments.end(), s) == op.arguments.end()) op.arguments.push_back(s);
    if (changed && std::find(op.written.begin(), op.written.end(), s) == op.written.end()) op.written.push_back(s);
    held_.push_back(p.storage);
  }
  ops_.push_back(std::move(op));
  pending_.clear();
  pending_name_ = nullptr;
}

}  // namespace tessera
