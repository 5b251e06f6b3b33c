#pragma once
// Offloaded activations (vDNN; ZeRO-Infinity's activation offload): the tensors a unit saved for
// its backward wait in the nvme tier instead of compute memory, for the forwards the plan marks
// (Action::offload, from memory.offload_activations).
//
// Every move is at a fixed point of the program, so the activation peak does not depend on how
// fast the disk is and exec::predict_program_memory walks the same rules:
//   - after the forward that saved them, their storages are written to the store (on its copy
//     engine, while the next unit action computes);
//   - before the unit action after that, the writes are waited for and the compute copies freed;
//   - before each backward, the storages of the next backward in the program (on this rank) are
//     made resident and read back, so the read overlaps this backward; the backward that reads
//     them waits for its own.
// A storage two units saved (a view shared across units) moves once. Bytes come back exactly, so
// a run with offloading gives the same bits as one without.
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "exec/transform.h"
#include "memory/nvme_store.h"

namespace tessera::exec {

class ActivationOffload final : public Transform {
 public:
  explicit ActivationOffload(memory::NvmeStore& store);
  ~ActivationOffload() override;

  std::string_view name() const override { return "activation offload (nvme)"; }
  void begin(const Program& program) override;
  void before(const Event& event) override;
  void after(const Event& event) override;
  void finish(const Program& program) override;

 private:
  enum class State : uint8_t { Writing, OnNvme, Reading, Resident };
  struct Moved {
    std::shared_ptr<Storage> storage;
    memory::Extent extent;
    std::shared_ptr<memory::CopyWork> work;
    State state = State::Writing;
    int written_at = 0;  // the unit action (count within the program) after which it was written
  };
  using UnitKey = std::pair<int, int>;  // (microbatch, unit)

  void evict_written_before(int unit_action);
  void fetch(const UnitKey& key);          // posts the reads of what `key` holds on the nvme tier
  // Waits until everything `key` holds is in compute memory, and lets go of it.
  void make_resident(const UnitKey& key);
  void release(const UnitKey& key);

  memory::NvmeStore& store_;
  std::map<const Storage*, Moved> moved_;
  std::map<UnitKey, std::vector<const Storage*>> units_;
  int unit_actions_ = 0;  // unit actions begun in this program
};

}  // namespace tessera::exec
