#pragma once
// A record of the ops a piece of code runs, in order: each op's name, the storages of its tensor
// arguments, which of them it wrote, and its measured time. The rematerialization planner turns
// the record of a unit's forward and backward into a graph of operations
// (memory/remat/op_graph.h), so that graph comes from running the modules, not from a second
// description of them.
//
// Like the profiler (core/profiler.h), the trace is reached through a thread-local pointer that
// only OpTraceInstall sets: the ops take tensors only, and an observer that changes no result
// should not widen their signatures. With no trace installed an op pays one thread-local read and
// a null test per argument, and computes exactly what it computes without it.
//
// What an op wrote is measured, not declared: the trace hashes every tensor argument's bytes
// before and after the op's kernel, and an argument whose bytes changed was written. An op that
// writes the bytes a buffer already held goes unseen: adding a bias of zeros (a freshly
// initialised model's) leaves its output as it was, and a graph then has the ops after it read the
// version before it, which holds the same values. Otherwise, on the random values a recording runs
// on, a missed write needs two equal hashes. The kernel's time is taken between the two hashes.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace tessera {

class OpTrace {
 public:
  struct Op {
    const char* name;                        // the op's name (a string literal)
    std::vector<const Storage*> arguments;   // the distinct storages of its tensor arguments, in order
    std::vector<const Storage*> written;     // those whose bytes the op changed
    double seconds = 0;                      // the kernel's wall time
  };

  const std::vector<Op>& ops() const { return ops_; }
  int size() const { return static_cast<int>(ops_.size()); }

  // Called by the ops layer (ops/op_call.h): an op starts, names a tensor argument (any number of
  // times), runs its kernel between kernel_begin and kernel_end.
  void begin(const char* name);
  void argument(const Tensor& tensor);
  void kernel_begin();
  void kernel_end();

 private:
  struct Pending {
    std::shared_ptr<Storage> storage;
    Tensor tensor;
    uint64_t hash_before = 0;
  };
  std::vector<Op> ops_;
  std::vector<Pending> pending_;
  const char* pending_name_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  // Every storage seen stays alive as long as the trace, so no address is reused for another
  // tensor while the trace names storages by address.
  std::vector<std::shared_ptr<Storage>> held_;
};

// The trace of the calling thread, null when none.
OpTrace* current_op_trace();

// Makes `trace` (may be null) the calling thread's current trace until the end of the scope.
class OpTraceInstall {
 public:
  explicit OpTraceInstall(OpTrace* trace);
  ~OpTraceInstall();
  OpTraceInstall(const OpTraceInstall&) = delete;
  OpTraceInstall& operator=(const OpTraceInstall&) = delete;

 private:
  OpTrace* previous_;
};

}  // namespace tessera
