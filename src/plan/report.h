#pragma once
// Text reports of the cost model: the planner's table of best layouts and the detail of one layout.
#include <string>
#include <vector>

#include "plan/estimate.h"
#include "plan/offload_io.h"
#include "plan/planner.h"

namespace tessera::plan {

// One line describing the model: parameters, shapes.
std::string describe_model(const config::ModelConfig& m);
// One line describing the cluster.
std::string describe_cluster(const ClusterSpec& c);

// The planner's best layouts as a table: layout, memory per tag (GiB), step time, TF/s per device,
// MFU.
std::string format_plan(const config::ModelConfig& m, const ClusterSpec& c, const PlanRequest& request, const PlanResult& result);

// Everything known about one layout: memory by tag, time by cause, FLOPs, throughput.
std::string format_estimate(const config::ModelConfig& m, const ClusterSpec& c, const Estimate& e);

// A run's prediction (`tessera plan --config`): memory per rank of every pipeline stage by the
// runtime's tags (`stages`, stage 0 first), the memory peak of every tag at once (`peaks`, the
// compute tier) and the most the nvme tier holds (`nvme_peaks`), the worst rank marked; each
// stage's nvme I/O per step (`io`), where the run offloads; then the step time by cause.
std::string format_run_estimate(const config::ModelConfig& m, const ClusterSpec& c, const Estimate& e,
                                const std::vector<MemoryBreakdown>& stages, const std::vector<double>& peaks,
                                const std::vector<double>& nvme_peaks, const std::vector<OffloadIo>& io);

}  // namespace tessera::plan
