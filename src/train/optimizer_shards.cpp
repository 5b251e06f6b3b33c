#include "train/optimizer_shards.h"

#include <xxhash.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <span>

#include "io/safetensors.h"
#include "optim/offloaded_optimizer.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

// A run of elements: `length` consecutive elements of the one-process parameter from `global`,
// held at `local` onwards in this rank's block.
struct Run {
  int64_t local = 0;
  int64_t global = 0;
  int64_t length = 0;
};

// The runs of local elements [begin, end) of `p`, without its padding rows (which the one-process
// model does not have).
std::vector<Run> runs_of(const nn::Parameter& p, int64_t begin, int64_t end) {
  if (p.spec.splits.empty() && p.spec.padding_rows == 0) return {{begin, begin, end - begin}};
  std::vector<Run> runs;
  for (int64_t i = begin; i < end; ++i) {
    const int64_t g = p.spec.global_index(i);
    if (p.spec.is_padding(g)) continue;
    if (!runs.empty() && runs.back().local + runs.back().length == i && runs.back().global + runs.back().length == g) {
      ++runs.back().length;
    } else {
      runs.push_back({i, g, 1});
    }
  }
  return runs;
}

int64_t one_process_numel(const nn::Parameter& p) { return shape_numel(p.spec.unpadded_shape()); }

// The runs of `p` as the file stores them, [n, 2] int32 (first element, length).
std::vector<int32_t> runs_table(const nn::Parameter& p, const std::vector<Run>& runs) {
  TS_CHECK(one_process_numel(p) < (int64_t{1} << 31), "parameter '{}' has {} elements, more than a checkpoint's "
           "int32 element indices address", p.name, one_process_numel(p));
  std::vector<int32_t> table;
  for (const Run& r : runs) {
    table.push_back(static_cast<int32_t>(r.global));
    table.push_back(static_cast<int32_t>(r.length));
  }
  return table;
}

int64_t elements_of(const std::vector<Run>& runs) {
  int64_t n = 0;
  for (const Run& r : runs) n += r.length;
  return n;
}

// The elements of `from` (a segment's part of a state tensor, whose first element is local element
// `first`) at `runs`, copied to `into` as bytes; returns the end of what it wrote.
char* copy_runs(const Tensor& from, int64_t first, const std::vector<Run>& runs, char* into) {
  const size_t element = dtype_size(from.dtype());
  const char* base = static_cast<const char*>(from.raw());
  for (const Run& r : runs) {
    const size_t bytes = static_cast<size_t>(r.length) * element;
    std::memcpy(into, base + static_cast<size_t>(r.local - first) * element, bytes);
    into += bytes;
  }
  return into;
}

// The same, appended to `out`.
void append_runs(const Tensor& from, int64_t first, const std::vector<Run>& runs, std::vector<char>& out) {
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(elements_of(runs)) * dtype_size(from.dtype()));
  copy_runs(from, first, runs, out.data() + at);
}

// Keeps byte buffers alive until the writer has written them.
struct ShardWriter {
  io::SafeTensorsWriter file;
  std::deque<std::vector<char>> bytes;
  std::deque<std::vector<int32_t>> tables;

  void add_bytes(const std::string& name, DType dtype, std::vector<char> data) {
    bytes.push_back(std::move(data));
    const std::vector<char>& b = bytes.back();
    file.add(name, dtype, {static_cast<int64_t>(b.size() / dtype_size(dtype))}, b.data(), b.size());
  }
  // Bytes made when the file is written, one item at a time.
  void add_deferred(const std::string& name, DType dtype, int64_t elements, io::SafeTensorsWriter::Producer produce) {
    file.add(name, dtype, {elements}, static_cast<size_t>(elements) * dtype_size(dtype), std::move(produce));
  }
  void add_runs(const std::string& name, std::vector<int32_t> table) {
    tables.push_back(std::move(table));
    const std::vector<int32_t>& t = tables.back();
    file.add(name, DType::I32, {static_cast<int64_t>(t.size() / 2), 2}, t.data(), t.size() * sizeof(int32_t));
  }
};

// Element offsets of the segments in the owned order (segments + 1 entries).
std::vector<int64_t> element_offsets(const std::vector<optim::Segment>& segments) {
  std::vector<int64_t> offsets{0};
  for (const optim::Segment& s : segments) offsets.push_back(offsets.back() + s.size());
  return offsets;
}

bool writes(const std::vector<bool>& mask, const nn::Parameter& p) {
  return mask.empty() || mask[static_cast<size_t>(p.id)];
}

// What identifies the layout of a rank's optimizer state: its segments and the piece of each
// parameter they are in. Ranks that hold the same (data-parallel replicas) share it.
std::string layout_fingerprint(const std::vector<optim::Segment>& segments) {
  std::string text;
  for (const optim::Segment& s : segments) {
    text += fmt::format("{}:{}-{}", s.param->name, s.begin, s.end);
    for (const nn::ShardSpec::Split& split : s.param->spec.splits) text += fmt::format("/{}.{}", split.dim, split.index);
    text += ';';
  }
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

// One piece of a parameter in a rank's optimizer state: its segment (in the owned order) and the
// runs of the segment's elements that the file holds.
struct StatePiece {
  size_t segment = 0;
  int64_t first = 0;  // the segment's first local element of the parameter
  std::vector<Run> runs;
};

// The producer of one parameter's values of state tensor `tensor` for an offloaded optimizer: it
// reads the chunk that holds them (the reader keeps the chunk read last, so the parameters of one
// chunk read it once) and copies them out, one parameter's bytes beside the chunk.
io::SafeTensorsWriter::Producer offloaded_state_of(std::shared_ptr<optim::OffloadedOptimizer::ChunkReader> reader,
                                                   std::vector<StatePiece> pieces, size_t tensor, DType dtype,
                                                   int64_t elements) {
  return [reader = std::move(reader), pieces = std::move(pieces), tensor, dtype, elements] {
    Tensor out = Tensor::empty({elements}, dtype, MemoryTag::Optimizer, reader->memory());
    char* into = static_cast<char*>(out.raw());
    for (const StatePiece& piece : pieces) {
      const size_t chunk = reader->chunk_of(piece.segment);
      const optim::StateDict& state = reader->read(chunk);
      const Tensor part = optim::StateDict::part(state.tensors.at(tensor), piece.segment - reader->first_segment(chunk),
                                                 reader->element_offsets());
      into = copy_runs(part, piece.first, piece.runs, into);
    }
    return out;
  };
}

}  // namespace

bool state_moves_between_layouts(const optim::StateDict& state) {
  for (const optim::StateTensor& t : state.tensors) {
    if (!t.segment_offsets.empty()) return false;
  }
  return true;
}

void write_optimizer_shard(const std::string& path, const ModelState& model, int rank, int ranks) {
  const std::vector<optim::Segment> segments = model.master_segments();
  ShardWriter out;
  out.file.set_metadata("format", "tessera-optimizer-shard");
  out.file.set_metadata("rank", std::to_string(rank));
  out.file.set_metadata("ranks", std::to_string(ranks));
  // An offloaded state is read chunk by chunk as the file is written, never whole; its first chunk
  // tells the names and kinds of the state's tensors. A state that is not one value per element
  // (which needs the whole layout) is still read whole.
  std::shared_ptr<optim::OffloadedOptimizer::ChunkReader> reader;
  if (auto* offloaded = dynamic_cast<optim::OffloadedOptimizer*>(model.optimizer)) {
    reader = std::make_shared<optim::OffloadedOptimizer::ChunkReader>(*offloaded);
    if (!state_moves_between_layouts(reader->read(0))) reader.reset();
  }
  if (model.optimizer != nullptr) {
    optim::StateDict state = reader ? reader->read(0) : model.optimizer->state_dict();
    TS_CHECK(optim::total_elements(segments) == model.optimizer->owned_elements(),
             "the optimizer holds {} elements but its segments {}", model.optimizer->owned_elements(),
             optim::total_elements(segments));
    out.file.set_metadata("optimizer", std::string(model.optimizer->name()));
    if (!state_moves_between_layouts(state)) {
      out.file.set_metadata("layout", layout_fingerprint(segments));
      bool writer = false;
      for (const optim::Segment& s : segments) writer = writer || writes(model.writes_master, *s.param);
      // A data-parallel replica's state is its twin's, which that rank writes.
      if (writer) {
        for (const optim::StateTensor& t : state.tensors) out.file.add("raw." + t.name, t.values);
      }
    } else {
      const std::vector<int64_t> offsets = element_offsets(segments);
      // A parameter's segments on this rank, in order (one, unless the layout cut it several times).
      std::map<const nn::Parameter*, std::vector<size_t>> by_param;
      std::vector<const nn::Parameter*> order;
      for (size_t i = 0; i < segments.size(); ++i) {
        const nn::Parameter* p = segments[i].param;
        if (!writes(model.writes_master, *p) || segments[i].size() == 0) continue;
        if (!by_param.contains(p)) order.push_back(p);
        by_param[p].push_back(i);
      }
      for (const nn::Parameter* p : order) {
        std::vector<Run> all_runs;
        std::vector<StatePiece> pieces;
        for (const size_t i : by_param[p]) {
          pieces.push_back({i, segments[i].begin, runs_of(*p, segments[i].begin, segments[i].end)});
          all_runs.insert(all_runs.end(), pieces.back().runs.begin(), pieces.back().runs.end());
        }
        out.add_runs("runs." + p->name, runs_table(*p, all_runs));
        for (size_t t = 0; t < state.tensors.size(); ++t) {
          const std::string name = state.tensors[t].name + "." + p->name;
          const DType dtype = state.tensors[t].values.dtype();
          if (reader) {
            out.add_deferred(name, dtype, elements_of(all_runs),
                             offloaded_state_of(reader, pieces, t, dtype, elements_of(all_runs)));
            continue;
          }
          std::vector<char> data;
          for (const StatePiece& piece : pieces) {
            append_runs(optim::StateDict::part(state.tensors[t], piece.segment, offsets), piece.first, piece.runs, data);
          }
          out.add_bytes(name, dtype, std::move(data));
        }
      }
    }
  }
  for (const auto& [p, value] : model.previous_weights) {
    if (!writes(model.writes_previous, *p)) continue;
    const std::vector<Run> runs = runs_of(*p, 0, p->numel());
    std::vector<char> data;
    append_runs(value.reshape({p->numel()}), 0, runs, data);
    out.add_runs("previous_runs." + p->name, runs_table(*p, runs));
    out.add_bytes("previous." + p->name, DType::F32, std::move(data));
  }
  out.file.write(path);
  if (reader) reader->finish();
}

namespace {

// The shard files of a checkpoint, opened (mapped) once.
struct ShardFiles {
  std::string checkpoint;
  std::vector<io::SafeTensorsFile> files;

  // The one-process tensor `data_prefix`.<name> assembled from every file's pieces, as bytes of
  // `dtype`, and which of its elements some file held.
  void assemble(const nn::Parameter& p, const std::string& runs_prefix, const std::string& data_prefix, DType dtype,
                std::vector<char>& whole, std::vector<uint8_t>& covered) const {
    const int64_t n = one_process_numel(p);
    const size_t element = dtype_size(dtype);
    whole.assign(static_cast<size_t>(n) * element, 0);
    covered.assign(static_cast<size_t>(n), 0);
    for (const io::SafeTensorsFile& f : files) {
      const std::string runs_name = runs_prefix + "." + p.name, data_name = data_prefix + "." + p.name;
      if (!f.has(runs_name)) continue;
      const io::SafeTensorEntry& runs = f.entry(runs_name);
      TS_CHECK(runs.dtype == DType::I32 && runs.shape.size() == 2 && runs.shape[1] == 2,
               "checkpoint file '{}': '{}' is not an int32 [n, 2] table of element runs", f.path(), runs_name);
      TS_CHECK(f.has(data_name), "checkpoint file '{}' has the runs of '{}' but not its values '{}'", f.path(),
               p.name, data_name);
      const io::SafeTensorEntry& data = f.entry(data_name);
      TS_CHECK(data.dtype == dtype, "checkpoint file '{}': '{}' is {}, this run keeps it as {}", f.path(), data_name,
               dtype_name(data.dtype), dtype_name(dtype));
      std::vector<int32_t> table(static_cast<size_t>(runs.shape[0] * 2));
      std::memcpy(table.data(), runs.data, table.size() * sizeof(int32_t));
      int64_t at = 0;
      const int64_t held = shape_numel(data.shape);
      for (size_t r = 0; r < table.size(); r += 2) {
        const int64_t first = table[r], length = table[r + 1];
        TS_CHECK(first >= 0 && length > 0 && first + length <= n && at + length <= held,
                 "checkpoint file '{}': run {} of '{}' ({} elements from {}) lies outside the parameter's {} elements "
                 "or its {} stored values: the file is damaged",
                 f.path(), r / 2, p.name, length, first, n, held);
        std::memcpy(whole.data() + static_cast<size_t>(first) * element,
                    static_cast<const char*>(data.data) + static_cast<size_t>(at) * element,
                    static_cast<size_t>(length) * element);
        std::memset(covered.data() + first, 1, static_cast<size_t>(length));
        at += length;
      }
      TS_CHECK(at == held, "checkpoint file '{}': the runs of '{}' cover {} elements but it stores {}", f.path(),
               p.name, at, held);
    }
  }

  // Fills `into` (local elements [begin, end) of `p`) from the assembled tensor; padding rows are zero.
  void pick(const nn::Parameter& p, int64_t begin, int64_t end, const std::vector<char>& whole,
            const std::vector<uint8_t>& covered, const std::string& what, Tensor into) const {
    const size_t element = dtype_size(into.dtype());
    char* dst = static_cast<char*>(into.raw());
    for (int64_t i = begin; i < end; ++i) {
      char* at = dst + static_cast<size_t>(i - begin) * element;
      const int64_t g = p.spec.global_index(i);
      if (p.spec.is_padding(g)) {
        std::memset(at, 0, element);
        continue;
      }
      TS_CHECK(covered[static_cast<size_t>(g)] != 0,
               "checkpoint '{}' holds no {} for element {} of '{}': its shard files are incomplete; resume from "
               "another checkpoint", checkpoint, what, g, p.name);
      std::memcpy(at, whole.data() + static_cast<size_t>(g) * element, element);
    }
  }
};

ShardFiles open_shard_files(const std::string& path, const CheckpointManifest& manifest) {
  ShardFiles shards;
  shards.checkpoint = path;
  for (int r = 0; r < manifest.ranks; ++r) {
    const std::string name = optimizer_shard_file_name(r);
    TS_CHECK(manifest.files.contains(name), "checkpoint '{}' has no {}: a checkpoint of {} ranks holds one per rank",
             path, name, manifest.ranks);
    shards.files.push_back(io::SafeTensorsFile::open((fs::path(path) / name).string()));
  }
  return shards;
}

// Segment `s`'s part of every tensor of `state` (part `index`, where the state's segments start at
// `element_offsets`), picked out of the files' pieces; `whole` and `covered` hold one parameter's
// assembled values at a time.
void load_segment_state(const ShardFiles& shards, const optim::Segment& s, optim::StateDict& state, size_t index,
                        std::span<const int64_t> element_offsets, std::vector<char>& whole,
                        std::vector<uint8_t>& covered) {
  if (s.size() == 0) return;
  for (const optim::StateTensor& t : state.tensors) {
    shards.assemble(*s.param, "runs", t.name, t.values.dtype(), whole, covered);
    shards.pick(*s.param, s.begin, s.end, whole, covered, fmt::format("optimizer state '{}'", t.name),
                optim::StateDict::part(t, index, element_offsets));
  }
}

// Whether an offloaded optimizer's state is one value per element: its first chunk tells, read
// and let go again as a save reads it.
bool offloaded_state_moves(optim::OffloadedOptimizer& offloaded) {
  optim::OffloadedOptimizer::ChunkReader reader(offloaded);
  return state_moves_between_layouts(reader.read(0));
}

}  // namespace

bool load_optimizer_shards(const std::string& path, const CheckpointManifest& manifest, const ModelState& model,
                           const std::string& saved_layout, const std::string& this_layout) {
  const ShardFiles shards = open_shard_files(path, manifest);
  const std::vector<optim::Segment> segments = model.master_segments();
  std::vector<char> whole;
  std::vector<uint8_t> covered;
  auto* offloaded = dynamic_cast<optim::OffloadedOptimizer*>(model.optimizer);
  const bool chunk_by_chunk = offloaded != nullptr && offloaded_state_moves(*offloaded);
  if (chunk_by_chunk) {
    // Chunk by chunk into the nvme tier, one chunk's state in compute memory: the whole state may
    // be larger than RAM. The bits are those of the whole load: each element comes from the same
    // place in the files.
    TS_CHECK(optim::total_elements(segments) == offloaded->owned_elements(),
             "the optimizer holds {} elements but its segments {}", offloaded->owned_elements(),
             optim::total_elements(segments));
    offloaded->load_chunk_by_chunk(
        manifest.optimizer_steps, [&](optim::StateDict& state, size_t first, std::span<const int64_t> offsets) {
          for (size_t i = 0; i + 1 < offsets.size(); ++i) {
            load_segment_state(shards, segments.at(first + i), state, i, offsets, whole, covered);
          }
        });
  } else if (model.optimizer != nullptr) {
    // The state dict's tensors are views of the optimizer's storage (or, offloaded, every chunk's
    // joined): loading into them and then load_state_dict() loads it.
    optim::StateDict state = model.optimizer->state_dict();
    if (!state_moves_between_layouts(state)) {
      const std::string mine = layout_fingerprint(segments);
      const io::SafeTensorsFile* twin = nullptr;
      for (const io::SafeTensorsFile& f : shards.files) {
        const auto& meta = f.metadata();
        if (meta.contains("layout") && meta.at("layout") == mine && f.has("raw." + state.tensors.front().name)) {
          twin = &f;
          break;
        }
      }
      TS_CHECK(twin != nullptr,
               "checkpoint '{}' was saved with {} and this run has {}: optim.name = \"{}\" keeps state that is not "
               "one value per element (per-tensor or per-block statistics laid out by the shards of the saving "
               "layout), which does not move between layouts. Resume with {}, or start a new run from its weights "
               "with train.init_from",
               path, saved_layout, this_layout, model.optimizer->name(), saved_layout);
      for (optim::StateTensor& t : state.tensors) twin->copy_to("raw." + t.name, t.values);
    } else {
      const std::vector<int64_t> offsets = element_offsets(segments);
      for (size_t i = 0; i < segments.size(); ++i) {
        load_segment_state(shards, segments[i], state, i, offsets, whole, covered);
      }
    }
    state.steps = manifest.optimizer_steps;
    model.optimizer->load_state_dict(std::move(state));
  }
  if (model.previous_weights.empty() || manifest.state.step == 0) return chunk_by_chunk;
  bool saved_previous = false;
  for (const io::SafeTensorsFile& f : shards.files) {
    saved_previous = saved_previous || f.has("previous_runs." + model.previous_weights.front().first->name);
  }
  TS_CHECK(saved_previous, "checkpoint '{}' holds no previous weight version: it was saved by a schedule that flushes, "
           "and PipeDream-2BW's next batch reads the version before the newest. Resume with the schedule it was saved "
           "with, or start a new 2bw run from its weights with train.init_from", path);
  for (const auto& [p, value] : model.previous_weights) {
    shards.assemble(*p, "previous_runs", "previous", DType::F32, whole, covered);
    shards.pick(*p, 0, p->numel(), whole, covered, "previous weight version (PipeDream-2BW)", value.reshape({p->numel()}));
  }
  return chunk_by_chunk;
}

}  // namespace tessera::train
