#include "parallel/pipeline_timeline.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace tessera::parallel {

namespace {

// Round trips per rank for the clock offset: the shortest counts, so a few are enough to catch one
// that no thread switch delayed.
constexpr int kClockRoundTrips = 8;

// A record as plain numbers, for moving between ranks as bytes.
constexpr size_t kFields = 8;

void pack(const pipeline::MeasuredInstruction& m, std::vector<double>& out) {
  out.insert(out.end(), {double(m.op), double(m.stage), double(m.chunk), double(m.microbatch), double(m.tensor),
                         double(m.peer), m.start, m.end});
}

pipeline::MeasuredInstruction unpack(const double* v) {
  pipeline::MeasuredInstruction m;
  m.op = static_cast<pipeline::Op>(v[0]);
  m.stage = static_cast<int>(v[1]);
  m.chunk = static_cast<int>(v[2]);
  m.microbatch = static_cast<int>(v[3]);
  m.tensor = static_cast<pipeline::Tensor>(v[4]);
  m.peer = static_cast<int>(v[5]);
  m.start = v[6];
  m.end = v[7];
  return m;
}

void send_double(dist::Communicator& comm, double value, int peer) {
  comm.send(&value, sizeof value, DType::U8, peer)->wait();
}

double recv_double(dist::Communicator& comm, int peer) {
  double value = 0;
  comm.recv(&value, sizeof value, DType::U8, peer)->wait();
  return value;
}

struct ClockOffsets {
  std::vector<double> offset;       // [rank]: add to the rank's times to put them on rank 0's clock
  std::vector<double> uncertainty;  // [rank]: half the shortest round trip
};

// Collective: rank 0 exchanges kClockRoundTrips pings with each other rank in turn, then tells
// everyone the result.
ClockOffsets measure_offsets(dist::Communicator& comm, const exec::TimelineRecorder& recorder) {
  const int ranks = comm.size();
  ClockOffsets c;
  c.offset.assign(static_cast<size_t>(ranks), 0.0);
  c.uncertainty.assign(static_cast<size_t>(ranks), 0.0);
  for (int r = 1; r < ranks; ++r) {
    if (comm.rank() == 0) {
      double shortest = std::numeric_limits<double>::infinity();
      for (int k = 0; k < kClockRoundTrips; ++k) {
        const double sent = recorder.now();
        send_double(comm, sent, r);
        const double theirs = recv_double(comm, r);
        const double back = recorder.now();
        if (back - sent < shortest) {
          shortest = back - sent;
          c.offset[static_cast<size_t>(r)] = (sent + back) / 2 - theirs;
          c.uncertainty[static_cast<size_t>(r)] = shortest / 2;
        }
      }
    } else if (comm.rank() == r) {
      for (int k = 0; k < kClockRoundTrips; ++k) {
        recv_double(comm, 0);
        send_double(comm, recorder.now(), 0);
      }
    }
  }
  std::vector<double> both(c.offset);
  both.insert(both.end(), c.uncertainty.begin(), c.uncertainty.end());
  comm.broadcast(both.data(), both.size() * sizeof(double), DType::U8, 0)->wait();
  std::copy(both.begin(), both.begin() + ranks, c.offset.begin());
  std::copy(both.begin() + ranks, both.end(), c.uncertainty.begin());
  return c;
}

}  // namespace

std::vector<pipeline::MeasuredInstruction> instruction_records(const std::vector<pipeline::Instruction>& instructions,
                                                               const exec::Program& program,
                                                               const exec::TimelineRecorder& recorder) {
  const std::vector<exec::TimelineRecorder::Span>& spans = recorder.spans();
  TS_CHECK(spans.size() == program.actions.size(), "the timeline recorder holds {} actions but the program has {}: "
           "record the step with StepOptions::timeline", spans.size(), program.actions.size());
  constexpr double kNone = -1;
  std::vector<double> start(instructions.size(), kNone), end(instructions.size(), kNone);
  for (size_t a = 0; a < program.actions.size(); ++a) {
    const exec::Action& action = program.actions[a];
    TS_CHECK(action.instruction >= 0 && action.instruction < static_cast<int>(instructions.size()),
             "action {} ({}) comes from no instruction of the rank's list of {}", a, exec::describe(action),
             instructions.size());
    TS_CHECK(spans[a].start >= 0 && spans[a].end >= spans[a].start,
             "action {} ({}) was not recorded: the step ended before it ran", a, exec::describe(action));
    const auto i = static_cast<size_t>(action.instruction);
    if (start[i] == kNone) start[i] = spans[a].start;
    end[i] = std::max(end[i], spans[a].end);
  }
  std::vector<pipeline::MeasuredInstruction> records;
  records.reserve(instructions.size());
  double previous_end = 0;
  for (size_t i = 0; i < instructions.size(); ++i) {
    const pipeline::Instruction& ins = instructions[i];
    pipeline::MeasuredInstruction m;
    m.op = ins.op;
    m.stage = ins.stage;
    m.chunk = ins.chunk;
    m.microbatch = ins.microbatch;
    m.tensor = ins.tensor;
    m.peer = ins.peer;
    m.start = start[i] == kNone ? previous_end : start[i];
    m.end = start[i] == kNone ? previous_end : end[i];
    previous_end = m.end;
    records.push_back(m);
  }
  return records;
}

pipeline::MeasuredTimeline gather_timeline(const pipeline::Schedule& schedule, const exec::Program& program,
                                           const exec::TimelineRecorder& recorder, dist::Communicator* pipeline) {
  const int ranks = pipeline == nullptr ? 1 : pipeline->size();
  const int rank = pipeline == nullptr ? 0 : pipeline->rank();
  TS_CHECK(ranks == schedule.ranks, "the pipeline group has {} ranks but the schedule {}", ranks, schedule.ranks);
  pipeline::MeasuredTimeline t;
  t.kind = schedule.kind;
  t.ranks = schedule.ranks;
  t.microbatches = schedule.microbatches;
  t.chunks = schedule.chunks;
  const std::vector<pipeline::MeasuredInstruction> mine =
      instruction_records(schedule.programs[static_cast<size_t>(rank)], program, recorder);
  if (ranks == 1) {
    t.clock_uncertainty = {0.0};
    t.records = {mine};
    return t;
  }
  const ClockOffsets clocks = measure_offsets(*pipeline, recorder);
  std::vector<double> packed;
  for (const pipeline::MeasuredInstruction& m : mine) pack(m, packed);
  std::vector<size_t> counts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) counts[static_cast<size_t>(r)] = schedule.programs[static_cast<size_t>(r)].size();
  TS_CHECK(counts[static_cast<size_t>(rank)] == mine.size(), "rank {} recorded {} instructions of its {}", rank,
           mine.size(), counts[static_cast<size_t>(rank)]);
  std::vector<size_t> bytes(counts.size());
  size_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    bytes[r] = counts[r] * kFields * sizeof(double);
    total += counts[r];
  }
  std::vector<double> all(total * kFields);
  pipeline->all_gather(packed.data(), all.data(), bytes, DType::U8)->wait();

  const double step_start = *std::min_element(clocks.offset.begin(), clocks.offset.end());
  t.clock_uncertainty = clocks.uncertainty;
  const double* next = all.data();
  for (int r = 0; r < ranks; ++r) {
    const double shift = clocks.offset[static_cast<size_t>(r)] - step_start;
    std::vector<pipeline::MeasuredInstruction> records;
    for (size_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, next += kFields) {
      pipeline::MeasuredInstruction m = unpack(next);
      m.start += shift;
      m.end += shift;
      records.push_back(m);
    }
    t.records.push_back(std::move(records));
  }
  return t;
}

}  // namespace tessera::parallel
