#pragma once
// Published measurements the cost model is held against: Table 1 of Narayanan et al. 2021
// ("Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"), GPT models
// from 1.7B to 1T parameters on A100-80GB (Selene), V = 51200, s = 2048.
#include <string>
#include <vector>

#include "plan/estimate.h"

namespace tessera::plan {

struct PublishedRow {
  std::string config;      // shipped model config name, e.g. "megatron-1t"
  double params_billion;   // as printed
  int heads, hidden, layers;
  int tp, pp, gpus;
  int64_t batch;
  double tflops_per_gpu;   // achieved, counting the recompute forward (hardware FLOPs)
  double percent_peak;
  double aggregate_pflops;
};

const std::vector<PublishedRow>& megatron_table1();

// The row's model: GPT-2 architecture (LayerNorm, GeLU, learned positions, biases, tied
// embeddings, dropout 0.1) with the row's shapes, V = 51200, s = 2048, F = 4h.
config::ModelConfig published_model(const PublishedRow& row);

// The row's layout. From the table: tp, pp, dp = GPUs/(tp pp), B. Assumed (not in the table, see
// docs/planner.md): microbatch 1; full recompute; bf16/fp16 mixed precision; no sequence
// parallelism, no ZeRO, materialized attention (the paper predates them); interleaved 1F1B with
// the smallest v > 1 that divides the layers per stage when pp > 1.
Layout published_layout(const PublishedRow& row);

struct AccuracyRow {
  PublishedRow row;
  Estimate predicted;
  double error = 0;  // predicted / published - 1
};
std::vector<AccuracyRow> table1_accuracy(const ClusterSpec& cluster, const PipelineModel& pipeline = closed_form_pipeline());

// The markdown table of predicted vs published TFLOP/s per GPU with the error of each row.
std::string format_accuracy_table(const std::vector<AccuracyRow>& rows, const ClusterSpec& cluster,
                                  const std::string& pipeline_name = closed_form_pipeline().name);

// The efficiency.gemm value that minimizes the mean squared log error over Table 1 (a 1-D search
// with every other constant held): how the shipped A100 value was calibrated.
double calibrate_gemm_efficiency(const ClusterSpec& cluster, const PipelineModel& pipeline = closed_form_pipeline());

}  // namespace tessera::plan
