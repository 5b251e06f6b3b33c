#include "exec/interpreter.h"

#include <chrono>

namespace tessera::exec {

Interpreter::Interpreter(nn::GPT& model, ParameterOwnership& ownership, TransformChain& transforms,
                         MemoryAccountant& memory, dist::Communicator* pipeline, DType compute)
    : model_(model),
      ownership_(ownership),
      transforms_(transforms),
      memory_(memory),
      pipeline_(pipeline),
      compute_(compute) {}

namespace {
// Clears the event on every exit, so nothing reads a program that has gone.
struct EventScope {
  ParameterOwnership& ownership;
  EventScope(ParameterOwnership& o, const Event* e) : ownership(o) { ownership.set_event(e); }
  ~EventScope() { ownership.set_event(nullptr); }
};

// Times one action for the recorder, if there is one, on every way out of the loop body.
class ActionTimer {
 public:
  ActionTimer(TimelineRecorder* recorder, int index) : recorder_(recorder), index_(static_cast<size_t>(index)) {
    if (recorder_) recorder_->start(index_);
  }
  ~ActionTimer() {
    if (recorder_) recorder_->end(index_);
  }
  ActionTimer(const ActionTimer&) = delete;
  ActionTimer& operator=(const ActionTimer&) = delete;

 private:
  TimelineRecorder* recorder_;
  size_t index_;
};

// The profiler's name and category of an action (core/profiler.h): literals, which outlive it.
const char* action_name(const Action& a) {
  switch (a.kind) {
    case Action::Kind::OptimizerStep: return "optimizer step";
    case Action::Kind::Send: return "pipeline send";
    case Action::Kind::Recv: return "pipeline receive";
    case Action::Kind::Unit: return phase_name(a.phase).data();  // phase_name's views are literals
  }
  return "action";
}

ProfileCategory action_category(const Action& a) {
  switch (a.kind) {
    case Action::Kind::OptimizerStep: return ProfileCategory::Optimizer;
    case Action::Kind::Send:
    case Action::Kind::Recv: return ProfileCategory::Communication;
    case Action::Kind::Unit: return ProfileCategory::Other;
  }
  return ProfileCategory::Other;
}

// Unique per step among the transfers of one pair of ranks: microbatch, boundary and payload. MPI
// guarantees tags up to 32767; a larger pipeline is refused rather than risk a mismatch. A program
// of several batches reuses its tags every two batches, so its length is not bounded by them: MPI
// matches messages of one tag between two ranks in the order they were posted, and both ends
// post each kind of transfer across one boundary in microbatch order.
int transfer_tag(const Program& program, const Action& a) {
  const int per_batch = program.microbatches / program.batches;
  const int cycle = program.batches == 1 ? per_batch : 2 * per_batch;
  const int64_t tag =
      (int64_t{a.microbatch % cycle} * program.stages + a.edge) * 2 + (a.payload == pipeline::Tensor::Gradient);
  TS_CHECK(tag < 32768, "{}: {} microbatches across {} stages need more message tags than MPI guarantees (32767); "
           "use fewer microbatches per step", describe(a), cycle, program.stages);
  return static_cast<int>(tag);
}
}  // namespace

ProgramResult Interpreter::run(const Program& program, std::span<const MicrobatchInput> microbatches,
                               const StepOptions& options, const std::function<void(int batch)>& optimizer_step) {
  TS_CHECK(static_cast<int>(microbatches.size()) >= program.microbatches,
           "the program runs {} microbatches but {} were given", program.microbatches, microbatches.size());
  TS_CHECK(program.batches >= 1 && program.microbatches % program.batches == 0,
           "a program of {} batches cannot hold {} microbatches", program.batches, program.microbatches);
  const int per_batch = program.microbatches / program.batches;
  const int units = model_.num_units();
  std::vector<MicrobatchState> states(static_cast<size_t>(program.microbatches));
  for (MicrobatchState& s : states) {
    s.ctx.resize(static_cast<size_t>(units));
    s.kept.assign(static_cast<size_t>(units), false);
    s.awaiting_weight.assign(static_cast<size_t>(units), false);
    s.input.resize(static_cast<size_t>(units));
    s.grad.resize(static_cast<size_t>(units));
    s.backward_done = units;
  }
  ProgramResult result;
  if (program.training) {
    result.batch_loss_sums.assign(static_cast<size_t>(program.batches), 0.0);
    result.batch_counted.assign(static_cast<size_t>(program.batches), 0);
  }
  bool finished = false;  // the transforms finished everything run so far
  // Receives indexed by action; sends in flight.
  std::vector<Transfer> posted(program.actions.size()), sends;
  auto complete_sends = [&] {
    for (Transfer& t : sends) t.work->wait();
    sends.clear();
  };
  if (options.timeline) options.timeline->begin(program.actions.size());
  const ProfilerInstall profiling(options.profiler);
  transforms_.begin(program);
  post_receives_after(program, -1, microbatches, posted);
  // Receives reached in the list but not yet waited for: each is waited for right before the unit
  // action that reads its tensor (as the schedule simulator's isend/irecv model has it), so a
  // receive listed ahead of an unrelated compute does not stall that compute.
  std::vector<int> awaited;
  const auto wait_receives_for = [&](const Action& consumer) {
    std::erase_if(awaited, [&](int j) {
      const Action& r = program.actions[static_cast<size_t>(j)];
      // An activation is the input of the unit the receive names; a gradient is that of the
      // output of the unit below it (the last of this rank's chunk), whose backward reads it.
      const bool activation = r.payload == pipeline::Tensor::Activation;
      const bool reads = r.microbatch == consumer.microbatch && activation == is_forward(consumer.phase) &&
                         consumer.unit == (activation ? r.unit : r.unit - 1);
      if (!reads) return false;
      const ActionTimer timer(options.timeline, j);  // the recv's span: the time spent waiting for it
      const ProfileScope phase(options.profiler, "pipeline receive", ProfileCategory::Communication, r.unit,
                               r.microbatch);
      receive(program, j, states[static_cast<size_t>(r.microbatch)], posted);
      return true;
    });
  };
  for (int i = 0; i < static_cast<int>(program.actions.size()); ++i) {
    const Action& a = program.actions[static_cast<size_t>(i)];
    if (a.kind == Action::Kind::Recv) {
      post_receives_after(program, i - 1, microbatches, posted);
      awaited.push_back(i);
      // The stages above have back-propagated this microbatch (what a recompute before the wait
      // must know: its output no longer goes into their input slot), whenever the data lands.
      if (a.payload == pipeline::Tensor::Gradient) {
        TS_CHECK(a.microbatch >= 0 && a.microbatch < program.microbatches, "action {} names microbatch {} of {}",
                 describe(a), a.microbatch, program.microbatches);
        states[static_cast<size_t>(a.microbatch)].backward_done = a.unit;
      }
      continue;
    }
    if (a.kind == Action::Kind::Unit) wait_receives_for(a);  // before its own span begins
    const ActionTimer timer(options.timeline, i);
    // The action as a phase of the step: its own time (what no op, wait or cast inside claims) goes
    // to the phase's category, "other" for unit actions.
    const ProfileScope phase(options.profiler, action_name(a), action_category(a), a.unit, a.microbatch);
    if (a.kind == Action::Kind::OptimizerStep) {
      TS_CHECK(a.batch >= 0 && a.batch < program.batches, "{} names batch {} of {}", describe(a), a.batch,
               program.batches);
      check_finished(program, states, a.batch * per_batch, (a.batch + 1) * per_batch);
      // Only the last step waits for this rank's sends. Under PipeDream-2BW the next batch's
      // activations are already on their way, and the peer receives them after its own step of this
      // batch, which waits for this rank in the gradient norm: waiting here could hang both.
      if (a.batch + 1 == program.batches) complete_sends();
      if (!finished) transforms_.finish(program);
      finished = true;
      if (optimizer_step) optimizer_step(a.batch);
      continue;
    }
    TS_CHECK(a.microbatch >= 0 && a.microbatch < program.microbatches, "action {} names microbatch {} of {}",
             describe(a), a.microbatch, program.microbatches);
    TS_CHECK(a.unit >= 0 && a.unit < units, "action {} names unit {} of {}", describe(a), a.unit, units);
    MicrobatchState& s = states[static_cast<size_t>(a.microbatch)];
    if (a.kind == Action::Kind::Send) {
      send(program, i, s, sends);
      continue;
    }
    finished = false;
    post_receives_after(program, i, microbatches, posted);
    // Sends the peer has taken free their buffers here rather than at the end of the program, so
    // a rank does not hold every microbatch's sent activation (GPipe's m of them) until the step ends.
    std::erase_if(sends, [](Transfer& t) {
      if (!t.work->is_completed()) return false;
      t.work->wait();  // rethrows a failed transfer
      return true;
    });
    const MicrobatchInput& mb = microbatches[static_cast<size_t>(a.microbatch)];
    nn::StepContext step{memory_, ownership_};
    step.training = a.phase != Phase::Eval;
    step.seed = options.seed;
    step.step = options.step + static_cast<uint64_t>(a.batch);
    step.sample_offset = mb.sample_offset;
    step.compute = compute_;
    step.grad_scale = mb.data.grad_scale;
    // Only the first forward of a training microbatch counts: a recompute routes it again.
    if (a.phase == Phase::Forward) step.moe_statistics = &result.moe;
    Event event = event_of(program, i);
    event.step = &step;
    EventScope scope(ownership_, &event);
    transforms_.before(event);
    // The microbatch with the gradient scale the transforms left in the step context (a loss scale).
    MicrobatchInput scaled = mb;
    scaled.data.grad_scale = step.grad_scale;
    if (a.phase == Phase::Recompute) {
      const auto start = std::chrono::steady_clock::now();
      forward(a, s, scaled, step, result);
      result.recompute_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } else if (is_forward(a.phase)) {
      forward(a, s, scaled, step, result);
    } else {
      backward(a, s, step);
    }
    // What a training forward kept is a value of the program the transforms may move.
    Event done = event;
    std::vector<nn::SavedTensor> saved;
    if (a.phase == Phase::Forward && s.kept[static_cast<size_t>(a.unit)]) {
      saved = s.ctx[static_cast<size_t>(a.unit)].saved();
      done.saved = &saved;
    }
    transforms_.after(done);
  }
  if (!awaited.empty()) {
    TS_FAIL("{}: no action of the program reads what it receives",
            describe(program.actions[static_cast<size_t>(awaited.front())]));
  }
  check_finished(program, states, 0, program.microbatches);
  complete_sends();
  if (!finished) transforms_.finish(program);
  return result;
}

void Interpreter::post_receives_after(const Program& program, int i, std::span<const MicrobatchInput> microbatches,
                                      std::vector<Transfer>& posted) {
  for (int j = i + 1; j < static_cast<int>(program.actions.size()); ++j) {
    const Action& a = program.actions[static_cast<size_t>(j)];
    if (!is_transfer(a)) return;
    if (a.kind != Action::Kind::Recv || posted[static_cast<size_t>(j)].work) continue;
    TS_CHECK(pipeline_ != nullptr, "{}: the program moves tensors between pipeline ranks but the interpreter has no "
             "pipeline group", describe(a));
    TS_CHECK(a.microbatch >= 0 && a.microbatch < program.microbatches, "action {} names microbatch {} of {}",
             describe(a), a.microbatch, program.microbatches);
    const Tensor& tokens = microbatches[static_cast<size_t>(a.microbatch)].data.tokens;
    // An activation becomes the stage's input (an activation); a gradient is what a backward
    // passes down, which the model keeps in workspace.
    const MemoryTag tag = a.payload == pipeline::Tensor::Activation ? MemoryTag::Activations : MemoryTag::Workspace;
    // What crosses a stage boundary is the residual stream: this rank's part of each sequence.
    const int parts = transforms_.sequence_shard().parts;
    Tensor buffer =
        Tensor::empty({tokens.size(0), tokens.size(1) / parts, model_.config().n_embd}, compute_, tag, memory_);
    dist::WorkPtr work = pipeline_->recv(buffer.raw(), static_cast<size_t>(buffer.numel()), compute_, a.peer,
                                         transfer_tag(program, a), "pipeline instruction: " + describe(a));
    posted[static_cast<size_t>(j)] = Transfer{std::move(work), std::move(buffer)};
  }
}

void Interpreter::receive(const Program& program, int i, MicrobatchState& s, std::vector<Transfer>& posted) {
  const Action& a = program.actions[static_cast<size_t>(i)];
  const auto u = static_cast<size_t>(a.unit);
  const bool activation = a.payload == pipeline::Tensor::Activation;
  TS_CHECK(activation || a.payload == pipeline::Tensor::Gradient, "{}: nothing to move", describe(a));
  Transfer& t = posted[static_cast<size_t>(i)];
  TS_CHECK(t.work != nullptr, "{}: waited for before it was posted", describe(a));
  t.work->wait();
  if (activation) {
    TS_CHECK(!s.input[u].defined(), "{}: the input of unit {} is still stored", describe(a), a.unit);
    s.input[u] = std::move(t.buffer);
  } else {
    TS_CHECK(!s.grad[u].defined(), "{}: a gradient for unit {} is still stored", describe(a), a.unit);
    s.grad[u] = std::move(t.buffer);
  }
  t = Transfer{};
}

void Interpreter::send(const Program& program, int i, MicrobatchState& s, std::vector<Transfer>& sends) {
  const Action& a = program.actions[static_cast<size_t>(i)];
  const auto u = static_cast<size_t>(a.unit);
  const bool activation = a.payload == pipeline::Tensor::Activation;
  TS_CHECK(activation || a.payload == pipeline::Tensor::Gradient, "{}: nothing to move", describe(a));
  TS_CHECK(pipeline_ != nullptr, "{}: the program moves tensors between pipeline ranks but the interpreter has no "
           "pipeline group", describe(a));
  TS_CHECK(a.unit >= 0 && a.unit < model_.num_units(), "action {} names unit {} of {}", describe(a), a.unit,
           model_.num_units());
  Tensor& slot = activation ? s.input[u] : s.grad[u];
  TS_CHECK(slot.defined(), "{}: there is no {} to send (its {} has not run)", describe(a),
           activation ? "activation" : "gradient", activation ? "forward" : "backward");
  // The tensor leaves the stage's activations here, at a fixed point of the program, and travels
  // in a communication buffer that lives until the peer has taken it: when that happens depends on
  // the peer, so the stage's activation peak would otherwise depend on timing. A copy of one
  // [B, T, C] tensor, small next to the compute that produced it.
  Tensor buffer = Tensor::empty(slot.shape(), slot.dtype(), MemoryTag::Comm, memory_);
  buffer.copy_from(slot);
  slot = Tensor();
  dist::WorkPtr work = pipeline_->send(buffer.raw(), static_cast<size_t>(buffer.numel()), buffer.dtype(), a.peer,
                                       transfer_tag(program, a), "pipeline instruction: " + describe(a));
  // The peer may be waiting for this tensor now. Left to the progress thread, it would wait until
  // that thread got a core, which under a busy machine is after this rank's next compute
  // (measured: 1.5-4 ms per transfer on two vCPUs, docs/benchmarks.md); handed to MPI before this
  // rank computes again, the peer's receive completes on its own. (The MPI backend posts it on this
  // thread already, and there this returns at once; a backend that posts from its progress thread
  // is waited for here.)
  work->wait_started();
  sends.push_back(Transfer{std::move(work), std::move(buffer)});
}

void Interpreter::forward(const Action& a, MicrobatchState& s, const MicrobatchInput& mb, nn::StepContext& step,
                          ProgramResult& result) {
  const auto u = static_cast<size_t>(a.unit);
  TS_CHECK(!s.kept[u] && !s.awaiting_weight[u], "{}: the unit still holds the activations of an earlier forward",
           describe(a));
  TS_CHECK(a.unit < s.backward_done, "{}: the unit's backward already ran", describe(a));
  const Tensor x = s.input[u];
  TS_CHECK(a.unit == 0 || x.defined(), "{}: the unit's input is not stored (the recompute schedule is inconsistent)",
           describe(a));
  s.ctx[u] = nn::GPT::UnitCtx{};
  nn::GPT::UnitOutput out = model_.forward_unit(step, a.unit, s.ctx[u], x, mb.data,
                                                a.selective ? nn::GPT::Save::Selective : nn::GPT::Save::All);
  if (a.phase == Phase::Forward || a.phase == Phase::Eval) {
    result.loss_sum += out.loss_sum;
    result.counted += out.counted;
    if (!result.batch_loss_sums.empty()) {
      result.batch_loss_sums[static_cast<size_t>(a.batch)] += out.loss_sum;
      result.batch_counted[static_cast<size_t>(a.batch)] += out.counted;
    }
  }
  const bool keeps_all = a.keep == memory::Keep::All && a.phase != Phase::Eval;
  s.kept[u] = keeps_all;
  if (!keeps_all) s.ctx[u] = nn::GPT::UnitCtx{};
  // With its activations kept, the unit's context holds the input; the slot holds it otherwise.
  if (a.keep != memory::Keep::Input || a.phase == Phase::Eval) s.input[u] = Tensor();
  const size_t next = u + 1;
  if (out.y.defined() && static_cast<int>(next) < s.backward_done && next < s.input.size()) {
    TS_CHECK(!s.input[next].defined(), "{}: the output is still stored from an earlier forward", describe(a));
    s.input[next] = out.y;
  }
}

void Interpreter::backward(const Action& a, MicrobatchState& s, nn::StepContext& step) {
  const auto u = static_cast<size_t>(a.unit);
  const bool last_unit = a.unit + 1 == model_.num_units();
  if (a.phase == Phase::BackwardWeight) {
    TS_CHECK(s.awaiting_weight[u], "{}: the input half has not run", describe(a));
    model_.backward_unit(step, a.unit, s.ctx[u], Tensor(), nn::BackwardPart::Weight);
    s.awaiting_weight[u] = false;
    s.kept[u] = false;
    s.ctx[u] = nn::GPT::UnitCtx{};
    return;
  }
  TS_CHECK(s.kept[u], "{}: the unit's activations are not kept (it must be recomputed first)", describe(a));
  TS_CHECK(a.unit + 1 == s.backward_done, "{}: the backward of unit {} must run first", describe(a),
           s.backward_done - 1);
  const Tensor dy = last_unit ? Tensor() : s.grad[u + 1];
  TS_CHECK(last_unit || dy.defined(), "{}: no gradient arrived from unit {}", describe(a), a.unit + 1);
  const nn::BackwardPart part = a.phase == Phase::Backward ? nn::BackwardPart::Both : nn::BackwardPart::Input;
  Tensor dx = model_.backward_unit(step, a.unit, s.ctx[u], dy, part);
  if (!last_unit) s.grad[u + 1] = Tensor();
  if (a.unit > 0) s.grad[u] = dx;
  s.input[u] = Tensor();
  s.backward_done = a.unit;
  if (part == nn::BackwardPart::Both) {
    s.kept[u] = false;
    s.ctx[u] = nn::GPT::UnitCtx{};
  } else {
    s.awaiting_weight[u] = true;
  }
}

void Interpreter::check_finished(const Program& program, const std::vector<MicrobatchState>& states, int first,
                                 int end) const {
  for (auto m = static_cast<size_t>(first); m < static_cast<size_t>(end); ++m) {
    const MicrobatchState& s = states[m];
    if (program.training) {
      TS_CHECK(s.backward_done == program.first_unit, "the program ended with microbatch {} not back-propagated below unit {}", m,
               s.backward_done);
    }
    for (size_t u = 0; u < s.kept.size(); ++u) {
      TS_CHECK(!s.kept[u] || !program.training, "the program ended with unit {} of microbatch {} still holding its "
               "activations", u, m);
      TS_CHECK(!s.awaiting_weight[u], "the program ended before the weight half of unit {} for microbatch {}", u, m);
    }
  }
}

}  // namespace tessera::exec
