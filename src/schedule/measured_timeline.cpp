#include "schedule/measured_timeline.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/atomic_file.h"
#include "core/check.h"
#include "core/json_input.h"
#include "schedule/generators.h"

namespace tessera::pipeline {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "tessera pipeline timeline";
constexpr int kVersion = 1;
// More ranks or microbatches than any pipeline runs: bounds what an outside file can make us build.
constexpr int kMaxRanks = 4096;
constexpr int kMaxMicrobatches = 1 << 20;
constexpr int kMaxChunks = 64;

const char* tensor_name(Tensor tensor) {
  switch (tensor) {
    case Tensor::Activation: return "activation";
    case Tensor::Gradient: return "gradient";
    case Tensor::None: return "none";
  }
  return "none";
}

// Reads the fields of one document, naming the file and the field's path in every error.
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}

  const json& get(const json& parent, const std::string& path, const char* key) const {
    TS_CHECK(parent.is_object() && parent.contains(key), "{}: '{}{}' is missing", what_, path, key);
    return parent.at(key);
  }
  int integer(const json& parent, const std::string& path, const char* key, int lo, int hi) const {
    const json& v = get(parent, path, key);
    TS_CHECK(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
             "{}: '{}{}' is {}; expected an integer from {} to {}", what_, path, key, v.dump(), lo, hi);
    return static_cast<int>(v.get<int64_t>());
  }
  double seconds(const json& parent, const std::string& path, const char* key) const {
    const json& v = get(parent, path, key);
    TS_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= 0,
             "{}: '{}{}' is {}; expected seconds, a finite number of 0 or more", what_, path, key, v.dump());
    return v.get<double>();
  }
  std::string string(const json& parent, const std::string& path, const char* key) const {
    const json& v = get(parent, path, key);
    TS_CHECK(v.is_string(), "{}: '{}{}' is {}; expected a string", what_, path, key, v.dump());
    return v.get<std::string>();
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
};

Op parse_op(const Reader& r, const std::string& path, const std::string& name) {
  for (Op op : {Op::Forward, Op::Backward, Op::BackwardInput, Op::BackwardWeight, Op::Recompute, Op::Send, Op::Recv,
                Op::OptimizerStep}) {
    if (op_name(op) == name) return op;
  }
  TS_FAIL("{}: '{}op' is \"{}\"; expected forward, backward, backward-input, backward-weight, recompute, send, recv "
          "or optimizer-step",
          r.what(), path, name);
}

Tensor parse_tensor(const Reader& r, const std::string& path, const std::string& name) {
  if (name == "activation") return Tensor::Activation;
  if (name == "gradient") return Tensor::Gradient;
  TS_FAIL("{}: '{}tensor' is \"{}\"; expected \"activation\" or \"gradient\"", r.what(), path, name);
}

}  // namespace

Instruction instruction_of(const MeasuredInstruction& record) {
  Instruction ins;
  ins.op = record.op;
  ins.stage = record.stage;
  ins.chunk = record.chunk;
  ins.microbatch = record.microbatch;
  ins.tensor = record.tensor;
  ins.peer = record.peer;
  ins.weight_version = record.op == Op::OptimizerStep ? 1 : 0;
  return ins;
}

Schedule schedule_of(const MeasuredTimeline& timeline) {
  config::ParallelLayout layout;
  layout.pp = timeline.ranks;
  layout.virtual_stages = timeline.chunks;
  layout.schedule = timeline.kind;
  layout.global_batch = timeline.microbatches;
  return make_schedule(layout);
}

void check_follows(const MeasuredTimeline& timeline, const Schedule& schedule) {
  TS_CHECK(timeline.records.size() == schedule.programs.size(), "the timeline has records of {} ranks but the {} "
           "schedule has {}", timeline.records.size(), schedule_name(schedule.kind), schedule.programs.size());
  for (size_t r = 0; r < schedule.programs.size(); ++r) {
    const std::vector<Instruction>& list = schedule.programs[r];
    const std::vector<MeasuredInstruction>& records = timeline.records[r];
    TS_CHECK(records.size() == list.size(), "rank {} has {} records but {} instructions in the {} schedule (p = {}, "
             "m = {}, v = {})", r, records.size(), list.size(), schedule_name(schedule.kind), schedule.ranks,
             schedule.microbatches, schedule.chunks);
    for (size_t i = 0; i < list.size(); ++i) {
      const MeasuredInstruction& m = records[i];
      const Instruction expected = list[i];
      Instruction got = instruction_of(m);
      got.weight_version = expected.weight_version;
      TS_CHECK(got == expected, "record {} of rank {} is '{}' but the schedule's instruction there is '{}'", i, r,
               describe(got), describe(expected));
      TS_CHECK(std::isfinite(m.start) && m.start >= 0 && m.end >= m.start,
               "record {} of rank {} ({}) starts at {} s and ends at {} s; expected 0 <= start <= end", i, r,
               describe(expected), m.start, m.end);
    }
  }
}

std::string timeline_json(const MeasuredTimeline& timeline) {
  using ordered = nlohmann::ordered_json;
  ordered ranks = ordered::array();
  for (const std::vector<MeasuredInstruction>& records : timeline.records) {
    ordered list = ordered::array();
    for (const MeasuredInstruction& m : records) {
      ordered record{{"op", op_name(m.op)}, {"stage", m.stage}, {"microbatch", m.microbatch}, {"chunk", m.chunk}};
      if (is_transfer(m.op)) {
        record["tensor"] = tensor_name(m.tensor);
        record["peer"] = m.peer;
      }
      record["start"] = m.start;
      record["end"] = m.end;
      list.push_back(std::move(record));
    }
    ranks.push_back(std::move(list));
  }
  ordered document{{"format", kFormat},
                   {"version", kVersion},
                   {"schedule", std::string(schedule_name(timeline.kind))},
                   {"p", timeline.ranks},
                   {"m", timeline.microbatches},
                   {"v", timeline.chunks}};
  document["clock_uncertainty"] = timeline.clock_uncertainty;
  document["ranks"] = std::move(ranks);
  return document.dump(1) + "\n";
}

namespace {

MeasuredTimeline from_json(const json& document, const std::string& what) {
  const Reader r(what);
  TS_CHECK(document.is_object(), "{}: a JSON {}, expected an object with the records of a pipeline timeline", what,
           document.type_name());
  TS_CHECK(document.contains("format") && document.at("format") == kFormat,
           "{}: not a tessera pipeline timeline (its 'format' is not \"{}\"); a trainer writes one in the run folder "
           "with log.timeline = true", what, kFormat);
  const int version = r.integer(document, "", "version", 0, 1 << 30);
  TS_CHECK(version == kVersion, "{}: timeline format version {}; this tessera reads version {}", what, version,
           kVersion);
  MeasuredTimeline t;
  const std::string kind = r.string(document, "", "schedule");
  const std::optional<ScheduleKind> found = config::find_schedule_kind(kind);
  TS_CHECK(found.has_value(), "{}: 'schedule' is \"{}\"; expected one of {}", what, kind,
           config::schedule_kind_names());
  t.kind = *found;
  t.ranks = r.integer(document, "", "p", 1, kMaxRanks);
  t.microbatches = r.integer(document, "", "m", 1, kMaxMicrobatches);
  t.chunks = r.integer(document, "", "v", 1, kMaxChunks);
  const json& ranks = r.get(document, "", "ranks");
  TS_CHECK(ranks.is_array() && ranks.size() == static_cast<size_t>(t.ranks),
           "{}: 'ranks' must be a list of {} ranks' records (p = {})", what, t.ranks, t.ranks);
  t.clock_uncertainty.assign(static_cast<size_t>(t.ranks), 0.0);
  if (document.contains("clock_uncertainty")) {
    const json& u = document.at("clock_uncertainty");
    TS_CHECK(u.is_array() && u.size() == static_cast<size_t>(t.ranks),
             "{}: 'clock_uncertainty' must be a list of {} numbers (seconds per rank)", what, t.ranks);
    for (size_t i = 0; i < u.size(); ++i) {
      TS_CHECK(u[i].is_number() && std::isfinite(u[i].get<double>()) && u[i].get<double>() >= 0,
               "{}: 'clock_uncertainty[{}]' is {}; expected seconds, a finite number of 0 or more", what, i,
               u[i].dump());
      t.clock_uncertainty[i] = u[i].get<double>();
    }
  }
  // Every list holds at least a forward and a backward per microbatch and chunk, so the document's
  // own size bounds the schedule generated from its numbers.
  const int64_t least = int64_t{2} * t.microbatches * t.chunks;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    TS_CHECK(ranks[rank].is_array() && static_cast<int64_t>(ranks[rank].size()) >= least,
             "{}: 'ranks[{}]' must be a list of records, at least the {} forwards and backwards of m = {} "
             "microbatches and v = {} chunks", what, rank, least, t.microbatches, t.chunks);
  }
  // The schedule next: it is refused with the generator's reason before the records are read.
  Schedule schedule;
  try {
    schedule = schedule_of(t);
  } catch (const Error& e) {
    TS_FAIL("{}: no {} schedule for p = {}, m = {}, v = {}: {}", what, kind, t.ranks, t.microbatches, t.chunks,
            e.what());
  }
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const json& list = ranks[rank];
    const size_t expected = schedule.programs[rank].size();
    TS_CHECK(list.is_array() && list.size() == expected,
             "{}: 'ranks[{}]' must be a list of {} records, one per instruction of rank {}'s list", what, rank,
             expected, rank);
    std::vector<MeasuredInstruction> records;
    records.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string path = fmt::format("ranks[{}][{}].", rank, i);
      const json& item = list[i];
      MeasuredInstruction m;
      m.op = parse_op(r, path, r.string(item, path, "op"));
      m.stage = r.integer(item, path, "stage", 0, kMaxRanks * kMaxChunks);
      m.chunk = r.integer(item, path, "chunk", 0, kMaxChunks);
      m.microbatch = r.integer(item, path, "microbatch", -1, kMaxMicrobatches);
      if (is_transfer(m.op)) {
        m.tensor = parse_tensor(r, path, r.string(item, path, "tensor"));
        m.peer = r.integer(item, path, "peer", 0, kMaxRanks);
      }
      m.start = r.seconds(item, path, "start");
      m.end = r.seconds(item, path, "end");
      records.push_back(m);
    }
    t.records.push_back(std::move(records));
  }
  try {
    check_follows(t, schedule);
  } catch (const Error& e) {
    TS_FAIL("{}: {}", what, e.what());
  }
  return t;
}

}  // namespace

MeasuredTimeline parse_measured_timeline(std::string_view text, const std::string& what) {
  json document;
  try {
    document = parse_json_bounded(text, what);
  } catch (const json::exception& e) {
    TS_FAIL("{} is not valid JSON: {}", what, e.what());
  }
  return from_json(document, what);
}

void write_measured_timeline(const MeasuredTimeline& timeline, const std::string& path) {
  AtomicFile file(path);
  file.write(timeline_json(timeline));
  file.commit();
}

MeasuredTimeline read_measured_timeline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot read the timeline '{}': {}", path, std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return parse_measured_timeline(text.str(), fmt::format("timeline '{}'", path));
}

}  // namespace tessera::pipeline
