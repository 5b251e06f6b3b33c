#pragma once
// A solved schedule on disk, so a run does not solve the same MILP again. The file is JSON:
//   {"format": "tessera.remat.v1", "fingerprint": graph_fingerprint(graph), "nodes": n,
//    "budget_bytes": B, "status": "optimal", "cost": c, "peak_bytes": p, "solve_seconds": s,
//    "R": [[nodes computed in stage 0], ...], "S": [[nodes kept into stage 0], ...]}
// Stages list node indices rather than 0/1 rows: n^2 entries shrink to what the schedule does.
#include <cstdint>
#include <filesystem>
#include <optional>

#include "memory/remat/milp.h"

namespace tessera::memory::remat {

// Writes the solution of (graph, budget) to path (through a temporary file renamed over it, so a reader never
// sees half a file). Only solutions with a schedule are cached; throws otherwise.
void save_solution(const std::filesystem::path& path, const Graph& graph, int64_t budget_bytes,
                   const Solution& solution);

// The cached solution of (graph, budget): nullopt when the file does not exist or was written for another
// graph or budget. A file that cannot be read, is not this format, or holds a schedule that does not simulate
// to its recorded cost and peak is a tessera::Error naming the file.
std::optional<Solution> load_solution(const std::filesystem::path& path, const Graph& graph, int64_t budget_bytes);

}  // namespace tessera::memory::remat
