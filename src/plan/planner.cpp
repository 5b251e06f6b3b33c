#include "plan/planner.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    out.push_back(d);
    if (d != n / d) out.push_back(n / d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool faster(const Estimate& a, const Estimate& b) {
  if (a.time.step != b.time.step) return a.time.step < b.time.step;
  return a.memory.memory.total() < b.memory.memory.total();
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

PlanResult plan_layouts(const config::ModelConfig& m, const ClusterSpec& c, const PlanRequest& r, const PipelineModel& pipeline) {
  m.validate();
  TS_CHECK(r.devices >= 1, "plan: --devices must be at least 1 (got {})", r.devices);
  TS_CHECK(r.global_batch >= 1, "plan: --global-batch must be at least 1 sequence (got {})", r.global_batch);
  TS_CHECK(r.top >= 1, "plan: --top must be at least 1 (got {})", r.top);
  TS_CHECK(c.max_devices() == 0 || r.devices <= c.max_devices(),
           "plan: {} devices asked for, but cluster '{}' has {} ({} nodes of {}); ask for at most {}", r.devices, c.name,
           c.max_devices(), c.max_nodes, c.devices_per_node, c.max_devices());

  PlanResult result;
  // On a host cluster the ranks of a node share its memory.
  const double capacity = process_view(c, c.devices_on_a_node(r.devices)).usable_memory();
  bool have_smallest = false;
  Layout smallest;
  double smallest_bytes = 0;
  for (int64_t tp : divisors(r.devices)) {
    if (m.n_head % tp != 0 || m.kv_heads() % tp != 0 || m.ffn() % tp != 0) continue;
    for (int64_t pp : divisors(r.devices / tp)) {
      if (m.n_layer % pp != 0) continue;
      const int64_t dp = r.devices / (tp * pp);
      if (r.global_batch % dp != 0) continue;
      for (int64_t mb : divisors(r.global_batch / dp)) {
        if (mb > r.max_micro_batch) break;
        const int64_t microbatches = r.global_batch / (dp * mb);
        for (int64_t v : divisors(m.n_layer / pp)) {
          if (v > 1 && (pp == 1 || microbatches % pp != 0)) continue;
          for (bool sp : {false, true}) {
            if (sp && (tp == 1 || m.seq_len % tp != 0)) continue;
            for (int zero = 0; zero <= 3; ++zero) {
              if (zero > 0 && dp == 1) continue;
              if (zero > 1 && pp > 1) continue;
              // every_k and optimal stay out of the search; evaluate them with --layout. every_k
              // reruns every layer once, as full does, so it takes full's time and could only win
              // where memory binds: it stores fewer layer inputs but holds k whole layers (10-60
              // times an input each) at its peak, which pays off on deep pipelines' first stages
              // and costs elsewhere. Searching it would fill the ranking with twins of full's
              // layouts that tie on time. optimal needs a budget the request does not give, and a
              // DP per layout would add seconds over thousands of layouts.
              for (config::RecomputePolicy rc : {config::RecomputePolicy::None, config::RecomputePolicy::Selective, config::RecomputePolicy::Full}) {
                Layout l;
                l.tp = static_cast<int>(tp);
                l.pp = static_cast<int>(pp);
                l.dp = static_cast<int>(dp);
                l.virtual_stages = static_cast<int>(v);
                l.schedule = v > 1 ? config::ScheduleKind::Interleaved : config::ScheduleKind::OneFOneB;
                l.micro_batch = static_cast<int>(mb);
                l.global_batch = r.global_batch;
                l.sp = sp;
                l.zero_stage = zero;
                l.recompute = rc;
                l.precision = r.precision;
                l.flash_attention = r.flash_attention;
                l.activations = r.activations;
                l.overlap = r.overlap;
                ++result.considered;
                const double bytes = estimate_memory(m, l, pipeline).memory.total();
                if (!have_smallest || bytes < smallest_bytes) {
                  smallest = l;
                  smallest_bytes = bytes;
                  have_smallest = true;
                }
                if (bytes > capacity) continue;
                ++result.fitting;
                Estimate est = estimate(m, l, c, pipeline);
                if (static_cast<int>(result.best.size()) < r.top || faster(est, result.best.back())) {
                  result.best.insert(std::upper_bound(result.best.begin(), result.best.end(), est, faster), est);
                  if (static_cast<int>(result.best.size()) > r.top) result.best.pop_back();
                }
              }
            }
          }
        }
      }
    }
  }
  TS_CHECK(result.considered > 0,
           "plan: no valid layout of {} devices exists for this model and batch: tp must divide n_head={} and n_kv_head={}, pp "
           "must divide n_layer={}, and dp = devices/(tp pp) must divide the global batch {}; try a global batch that is a multiple of "
           "the device count",
           r.devices, m.n_head, m.kv_heads(), m.n_layer, r.global_batch);
  TS_CHECK(result.fitting > 0,
           "plan: the model ({:.3g} parameters) does not fit on {} devices of cluster '{}' in any layout: the smallest needs "
           "{:.1f} GiB per device ({}) but a device has {:.1f} GiB usable; use more devices, a cluster with more memory, or a "
           "smaller model",
           static_cast<double>(m.parameter_count()), r.devices, c.name, smallest_bytes / kGiB, to_string(smallest),
           capacity / kGiB);
  return result;
}

}  // namespace tessera::plan
