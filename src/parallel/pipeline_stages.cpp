#include "parallel/pipeline_stages.h"

#include <algorithm>

#include "config/parallel_layout.h"

namespace tessera::parallel {

PipelineStageParameters::PipelineStageParameters(nn::GPT& model, const exec::StagePlan& plan,
                                                 dist::Communicator& pipeline, exec::ParameterOwnership& ownership)
    : store_(model.parameters()), pipeline_(pipeline), ownership_(ownership), rank_(pipeline.rank()) {
  const int ranks = pipeline.size();
  holders_.assign(store_.all().size(), {});
  // Parameters by flat offset, to find those inside a unit's ranges without a scan of them all.
  std::vector<const nn::Parameter*> by_offset;
  for (const nn::Parameter& p : store_.all()) by_offset.push_back(&p);
  std::sort(by_offset.begin(), by_offset.end(), [](const nn::Parameter* a, const nn::Parameter* b) { return a->offset < b->offset; });
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const int rank = static_cast<int>(s) % ranks;
    for (int u = plan.stages[s].first; u < plan.stages[s].last; ++u) {
      for (const nn::ParamRange& range : model.units()[static_cast<size_t>(u)].params) {
        auto it = std::lower_bound(by_offset.begin(), by_offset.end(), range.begin,
                                   [](const nn::Parameter* p, int64_t at) { return static_cast<int64_t>(p->offset) < at; });
        for (; it != by_offset.end() && static_cast<int64_t>((*it)->offset) + (*it)->numel() <= range.end; ++it) {
          std::vector<int>& h = holders_[static_cast<size_t>((*it)->id)];
          if (std::find(h.begin(), h.end(), rank) == h.end()) h.push_back(rank);
        }
      }
    }
  }
  std::vector<int> others;
  for (const nn::Parameter& p : store_.all()) {
    std::vector<int>& h = holders_[static_cast<size_t>(p.id)];
    std::sort(h.begin(), h.end());
    TS_CHECK(!h.empty(), "pipeline: parameter '{}' is read by no stage", p.name);
    TS_CHECK(h.size() <= 2, "pipeline: parameter '{}' is read on {} ranks; a parameter may be shared by two stages "
             "(a tied embedding) at most", p.name, h.size());
    if (std::find(h.begin(), h.end(), rank_) == h.end()) others.push_back(p.id);
  }
  ownership_.claim(exec::Role::Master, *this, others);
}

PipelineStageParameters::~PipelineStageParameters() { ownership_.release(*this); }

std::vector<nn::ParamRange> PipelineStageParameters::domain() const {
  std::vector<const nn::Parameter*> held;
  for (const nn::Parameter& p : store_.all()) {
    const std::vector<int>& h = holders_[static_cast<size_t>(p.id)];
    if (p.numel() > 0 && std::find(h.begin(), h.end(), rank_) != h.end()) held.push_back(&p);
  }
  std::sort(held.begin(), held.end(), [](const nn::Parameter* a, const nn::Parameter* b) { return a->offset < b->offset; });
  std::vector<nn::ParamRange> pieces;
  bool last_shared = true;
  for (const nn::Parameter* p : held) {
    const auto begin = static_cast<int64_t>(p->offset);
    const bool shared = holders_[static_cast<size_t>(p->id)].size() == 2;
    if (!shared && !last_shared && pieces.back().end == begin) {
      pieces.back().end = begin + p->numel();
    } else {
      pieces.push_back({begin, begin + p->numel()});
    }
    last_shared = shared;
  }
  return pieces;
}

void PipelineStageParameters::sum_shared_gradients(std::span<const optim::Segment> segments) {
  // Both holders send their part and add the other's: a + b on one, b + a on the other, which
  // floating point makes equal, so both apply the same update.
  struct Exchange {
    float* grad = nullptr;
    std::vector<float> theirs;
    dist::WorkPtr send, recv;
  };
  std::vector<Exchange> exchanges;
  for (const optim::Segment& s : segments) {
    const std::vector<int>& h = holders_[static_cast<size_t>(s.param->id)];
    if (h.size() != 2 || s.size() == 0) continue;
    const int peer = h[0] == rank_ ? h[1] : h[0];
    // One segment per shared parameter on each side: the parameter is a piece of its own.
    const int tag = s.param->id;
    Exchange e;
    e.grad = s.grad;
    e.theirs.resize(static_cast<size_t>(s.size()));
    e.recv = pipeline_.recv(e.theirs.data(), e.theirs.size(), DType::F32, peer, tag);
    e.send = pipeline_.send(s.grad, static_cast<size_t>(s.size()), DType::F32, peer, tag);
    exchanges.push_back(std::move(e));
  }
  for (Exchange& e : exchanges) {
    e.recv->wait();
    e.send->wait();
    for (size_t i = 0; i < e.theirs.size(); ++i) e.grad[i] += e.theirs[i];
  }
}

void PipelineStageParameters::finish(const exec::Program& program) {
  if (program.training) sum_shared_gradients(ownership_.master_segments());
}

std::vector<optim::Segment> PipelineStageParameters::norm_segments(std::span<const optim::Segment> segments) const {
  std::vector<optim::Segment> out;
  for (optim::Segment s : segments) {
    if (held_by_lower_rank(*s.param)) continue;  // counted by a lower rank
    s.sharded_over |= 1u << static_cast<uint32_t>(config::MeshDim::PP);
    out.push_back(s);
  }
  return out;
}

void PipelineStageParameters::full_values(float* values) {
  // Runs of consecutive parameters with the same lowest holder, one broadcast each.
  if (values == nullptr) values = store_.flat_values().data<float>();
  const std::deque<nn::Parameter>& all = store_.all();
  for (size_t i = 0; i < all.size();) {
    const int root = holders_[static_cast<size_t>(all[i].id)].front();
    const auto begin = static_cast<int64_t>(all[i].offset);
    int64_t end = begin + all[i].numel();
    size_t j = i + 1;
    while (j < all.size() && holders_[static_cast<size_t>(all[j].id)].front() == root &&
           static_cast<int64_t>(all[j].offset) == end) {
      end += all[j].numel();
      ++j;
    }
    pipeline_.broadcast(values + begin, static_cast<size_t>(end - begin), DType::F32, root)->wait();
    i = j;
  }
}

}  // namespace tessera::parallel
