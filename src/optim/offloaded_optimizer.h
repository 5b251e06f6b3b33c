#pragma once
// The optimizer's state in the nvme tier (memory.offload_optimizer = "nvme"; ZeRO-Offload's and
// ZeRO-Infinity's optimizer offload). The owned segments are cut, at parameter boundaries, into
// chunks of at most about `chunk_bytes` of state; each chunk has an optimizer of its own, of the
// same kind and settings, whose state lives in the nvme tier between steps. A step streams the
// chunks: while chunk k updates, chunk k + 1's state is read and chunk k − 1's written back, so at
// most three chunks' state is in compute memory at once, and the disk works while the cores do.
// Between steps the last chunk finishes its write-back and the first kReadAhead chunks are read
// for the next step, behind its forward and backward (three chunks then too).
//
// An optimizer over a chunk gives the bits it gives over all segments when its update of a
// parameter reads only that parameter's segments: every optimizer here does when a parameter is
// one segment on the rank (no ZeRO, tensor or expert sharding), and the elementwise ones (AdamW,
// SGD) always. The run config refuses the others under sharding, whose per-tensor statistics are
// summed over ranks in collectives a chunked step would split differently on each rank.
//
// A checkpoint reads the state chunk by chunk (ChunkReader): one chunk beyond those the step keeps
// resident, so a state larger than RAM can be saved; and a resume writes it chunk by chunk
// (load_chunk_by_chunk), one chunk resident, so it can be loaded. state_dict() and
// load_state_dict() hold every chunk's state at once in compute memory, for optimizers whose state
// is not one value per element.
//
// The master values may live in the nvme tier too (memory.offload_params: ZeRO-3's shard, given
// as OffloadedValues): the segments then carry no values, and each chunk's values are read with
// its state before its update and written back with it, three chunks' at most (tag params). Unlike
// the state, none stay or are read ahead between steps: the step waits for the last chunk's
// values to be written, since the next forward's gathers read them from the nvme tier. The
// gradients may live there too (OffloadedGradients): each chunk's are read with its state and let
// go after its update, two chunks' at most (tag grads).
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "memory/nvme_store.h"
#include "optim/optimizer.h"

namespace tessera::optim {

// Master values kept outside compute memory, addressed by their index in the owned order (the
// segments' elements one after another).
class OffloadedValues {
 public:
  virtual ~OffloadedValues() = default;
  // Post the transfer of elements [first, first + count) into `into` or from `from`, which the
  // caller keeps alive until every handle completes. `first` and `first + count` fall on segment
  // boundaries.
  virtual std::vector<std::shared_ptr<memory::CopyWork>> read(int64_t first, int64_t count, float* into) = 0;
  virtual std::vector<std::shared_ptr<memory::CopyWork>> write(int64_t first, int64_t count, const float* from) = 0;
};

// Reduced gradients kept outside compute memory (ZeRO-3's gradient shard in the nvme tier),
// addressed as OffloadedValues are. The step scales a gradient in memory in place (the loss
// scale's inverse, then clipping); one that is elsewhere is scaled by the same factors, in the
// same order, when it is read, which gives the same bits.
class OffloadedGradients {
 public:
  virtual ~OffloadedGradients() = default;
  virtual std::vector<std::shared_ptr<memory::CopyWork>> read(int64_t first, int64_t count, float* into) = 0;
  virtual std::span<const float> scales() const = 0;
};

class OffloadedOptimizer final : public Optimizer {
 public:
  // Builds the optimizer of one chunk's segments (the kind and settings of the whole).
  using Factory = std::function<std::unique_ptr<Optimizer>(std::span<const Segment> chunk)>;
  // The state bytes an optimizer of that kind keeps for some segments.
  using StateBytes = std::function<int64_t(std::span<const Segment> chunk)>;
  // `segments`: the owned segments every step will pass, in order. Builds the chunks one at a time,
  // each written out before the next is made, so construction holds one chunk's state at most.
  // `values`: where the master values live when the segments carry none (null: in the segments).
  // `grads`: where the reduced gradients live when the segments carry none (null: in the segments).
  OffloadedOptimizer(std::span<const Segment> segments, const Factory& make, const StateBytes& state_bytes,
                     memory::NvmeStore& store, int64_t chunk_bytes, MemoryAccountant& memory,
                     OffloadedValues* values = nullptr, OffloadedGradients* grads = nullptr);
  ~OffloadedOptimizer() override;

  std::string_view name() const override { return chunks_.front().optimizer->name(); }
  void step(float lr, std::span<const Segment> segments) override;
  StateDict state_dict() override;
  void load_state_dict(StateDict state) override;
  int64_t steps_taken() const override { return chunks_.front().optimizer->steps_taken(); }
  int64_t owned_elements() const override { return owned_elements_; }
  size_t chunks() const { return chunks_.size(); }
  // Chunks read for the next step as soon as a step ends.
  static constexpr size_t kReadAhead = 2;

  // Loads the state one chunk at a time, for resuming a state larger than RAM. `fill` is given each
  // chunk's state in turn: its optimizer's state dict over its own segments (views of compute
  // memory), the owned index of its first segment and where each of its segments starts in it
  // (segments + 1 element offsets, for StateDict::part); it writes every element. The chunk is then
  // written to the nvme tier and leaves compute memory before the next is filled, and its old
  // bytes are never read. The optimizer is left as load_state_dict() leaves it: `steps` steps
  // taken, no chunk resident. Only for state that is one value per element (AdamW's moments, SGD's
  // momentum: what `fill` can cover whole); other state is refused. A `fill` that throws leaves the
  // chunks before it loaded and the rest as they were.
  using ChunkFill =
      std::function<void(StateDict& state, size_t first_segment, std::span<const int64_t> element_offsets)>;
  void load_chunk_by_chunk(int64_t steps, const ChunkFill& fill);

  // Reads the state one chunk at a time, for a checkpoint of a state larger than RAM. A chunk read
  // from the nvme tier leaves compute memory when the next is read (or the reader goes); one the
  // step keeps resident (read ahead for the next step, or still being written back) stays, its
  // transfers waited for. Nothing is written and the step's chunks are where the step left them,
  // so the next step runs as it would have, bit for bit. No step may run while a reader lives.
  class ChunkReader {
   public:
    explicit ChunkReader(OffloadedOptimizer& owner) : owner_(owner) {}
    ~ChunkReader();
    ChunkReader(const ChunkReader&) = delete;
    ChunkReader& operator=(const ChunkReader&) = delete;

    // The chunk that holds owned segment `segment`, and its first segment.
    size_t chunk_of(size_t segment) const;
    size_t first_segment(size_t chunk) const { return owner_.chunks_.at(chunk).first; }
    // Chunk `chunk`'s state: its optimizer's state dict over its own segments (views of the
    // resident state, valid until another chunk is read or the reader goes), and where each of its
    // segments starts in it (segments + 1 element offsets, for StateDict::part). Reading the chunk
    // read last costs nothing.
    const StateDict& read(size_t chunk);
    std::span<const int64_t> element_offsets() const { return offsets_; }
    // Accounts what the reader's user copies out of a chunk.
    MemoryAccountant& memory() const { return owner_.memory_; }
    // Lets go of the chunk read last (when it was not resident before); the destructor does too.
    void finish();

   private:
    OffloadedOptimizer& owner_;
    std::optional<size_t> current_;  // the chunk read last
    bool evict_current_ = false;     // it came from the nvme tier for the reader
    StateDict state_;
    std::vector<int64_t> offsets_;
  };

 private:
  struct Chunk {
    size_t first = 0, end = 0;  // segments [first, end)
    std::vector<int64_t> sizes;  // their elements
    std::unique_ptr<Optimizer> optimizer;
    std::vector<std::shared_ptr<Storage>> storages;  // its state's, each once
    std::vector<memory::Extent> extents;             // where each lives on the nvme tier
    std::vector<std::shared_ptr<memory::CopyWork>> works;
    bool resident = true;
    int64_t first_element = 0, elements = 0;  // in the owned order
    Tensor values;  // its master values while it updates (with OffloadedValues), tag params
    Tensor grads;   // its gradients while it updates (with OffloadedGradients), tag grads
    std::vector<std::shared_ptr<memory::CopyWork>> value_writes;
  };
  void write_back(Chunk& chunk);  // posts the writes
  void evict(Chunk& chunk);       // waits for them and frees the compute copies
  void fetch(Chunk& chunk);       // makes the state resident and posts the reads
  void wait(Chunk& chunk);        // waits for the reads
  void fetch_values(Chunk& chunk);  // posts the reads of its master values
  void write_values(Chunk& chunk);  // posts their writes
  void put_values(Chunk& chunk);    // waits for those and frees the buffer (evict does too)
  void fetch_grads(Chunk& chunk);   // posts the reads of its gradients

  memory::NvmeStore& store_;
  // Counts the chunks' master values, the whole state state_dict() joins and what a ChunkReader's
  // user copies out of a chunk.
  MemoryAccountant& memory_;
  OffloadedValues* values_;
  OffloadedGradients* grads_;
  std::vector<Chunk> chunks_;
  int64_t owned_elements_ = 0;
};

}  // namespace tessera::optim
