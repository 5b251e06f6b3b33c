#include "plan/published.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace tessera::plan {

const std::vector<PublishedRow>& megatron_table1() {
  static const std::vector<PublishedRow> rows = {
      {"megatron-1.7b", 1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4},
      {"megatron-3.6b", 3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8},
      {"megatron-7.5b", 7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2},
      {"megatron-18.4b", 18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6},
      {"megatron-39.1b", 39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8},
      {"megatron-76.1b", 76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8},
      {"megatron-145.6b", 145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1},
      {"megatron-310.1b", 310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4},
      {"megatron-529.6b", 529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2},
      {"megatron-1t", 1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0},
  };
  return rows;
}

config::ModelConfig published_model(const PublishedRow& row) {
  config::ModelConfig m;
  m.arch = config::Architecture::Gpt2;
  m.n_layer = row.layers;
  m.n_head = row.heads;
  m.n_embd = row.hidden;
  m.vocab_size = 51200;
  m.seq_len = 2048;
  m.ffn_hidden = 0;
  m.bias = true;
  m.tied_embeddings = true;
  m.dropout = 0.1f;
  m.validate();
  return m;
}

Layout published_layout(const PublishedRow& row) {
  Layout l;
  l.tp = row.tp;
  l.pp = row.pp;
  TS_CHECK(row.gpus % (row.tp * row.pp) == 0, "plan: published row {} has GPUs {} not divisible by t x p", row.config, row.gpus);
  l.dp = row.gpus / (row.tp * row.pp);
  l.global_batch = row.batch;
  l.micro_batch = 1;
  l.recompute = config::RecomputePolicy::Full;
  l.precision = Precision::Bf16;
  l.activations = ActivationAccounting::Megatron;  // the published runs are Megatron-LM's
  if (row.pp > 1) {
    const int per_stage = row.layers / row.pp;
    for (int v = 2; v <= per_stage; ++v) {
      if (per_stage % v == 0) {
        l.virtual_stages = v;
        l.schedule = config::ScheduleKind::Interleaved;
        break;
      }
    }
  }
  return l;
}

std::vector<AccuracyRow> table1_accuracy(const ClusterSpec& cluster, const PipelineModel& pipeline) {
  std::vector<AccuracyRow> out;
  for (const auto& row : megatron_table1()) {
    AccuracyRow a{row, estimate(published_model(row), published_layout(row), cluster, pipeline), 0};
    a.error = a.predicted.tflops_per_device / row.tflops_per_gpu - 1;
    out.push_back(a);
  }
  return out;
}

std::string format_accuracy_table(const std::vector<AccuracyRow>& rows, const ClusterSpec& cluster, const std::string& pipeline_name) {
  std::string out = fmt::format(
      "| model | t | p | d | v | B | m | published TF/s | predicted TF/s | error | bubble | tp comm | dp comm | mem GiB |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double sum_abs = 0, worst = 0;
  for (const auto& a : rows) {
    const Estimate& e = a.predicted;
    const Layout& l = e.layout;
    const double step = e.time.step;
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {:.0f} | {:.1f} | {:+.1f}% | {:.1f}% | {:.1f}% | {:.1f}% | {:.1f} |\n",
                       a.row.config, l.tp, l.pp, l.dp, l.virtual_stages, l.global_batch, l.microbatches(),
                       a.row.tflops_per_gpu,
                       e.tflops_per_device, 100 * a.error, 100 * e.time.bubble / step, 100 * e.time.tp_comm / step,
                       100 * e.time.dp_comm / step, e.memory.memory.total() / (1024.0 * 1024.0 * 1024.0));
    sum_abs += std::abs(a.error);
    worst = std::max(worst, std::abs(a.error));
  }
  out += fmt::format("\nCluster {}: efficiency.gemm = {}, efficiency.memory = {}, efficiency.link = {}, kernel overhead = {} us; "
                     "pipeline timing: {}.\n",
                     cluster.name, cluster.efficiency.gemm, cluster.efficiency.memory, cluster.efficiency.link,
                     cluster.efficiency.kernel_overhead * 1e6, pipeline_name);
  out += fmt::format("Mean absolute error {:.1f}%, largest {:.1f}% over {} rows.\n", 100 * sum_abs / rows.size(), 100 * worst,
                     rows.size());
  return out;
}

double calibrate_gemm_efficiency(const ClusterSpec& cluster, const PipelineModel& pipeline) {
  auto loss = [&](double gemm) {
    ClusterSpec c = cluster;
    c.efficiency.gemm = gemm;
    double sum = 0;
    for (const auto& a : table1_accuracy(c, pipeline)) sum += std::pow(std::log1p(a.error), 2);
    return sum;
  };
  // Golden-section search on (0.3, 1]: the loss is unimodal in this one constant.
  double lo = 0.3, hi = 1.0;
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  double f1 = loss(x1), f2 = loss(x2);
  while (hi - lo > 1e-4) {
    if (f1 < f2) {
      hi = x2;
      x2 = x1;
      f2 = f1;
      x1 = hi - g * (hi - lo);
      f1 = loss(x1);
    } else {
      lo = x1;
      x1 = x2;
      f1 = f2;
      x2 = lo + g * (hi - lo);
      f2 = loss(x2);
    }
  }
  return (lo + hi) / 2;
}

}  // namespace tessera::plan
