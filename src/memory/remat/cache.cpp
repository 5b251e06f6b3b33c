#include "memory/remat/cache.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"

namespace tessera::memory::remat {

namespace {

constexpr const char* kFormat = "tessera.remat.v1";

nlohmann::json stages(const BoolMatrix& m) {
  auto out = nlohmann::json::array();
  for (const auto& row : m) {
    auto nodes = nlohmann::json::array();
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i])
        nodes.push_back(i);
    }
    out.push_back(std::move(nodes));
  }
  return out;
}

BoolMatrix matrix(const nlohmann::json& j, int n) {
  if (!j.is_array() || static_cast<int>(j.size()) != n)
    throw std::runtime_error("a schedule matrix has the wrong number of stages");
  BoolMatrix m(static_cast<size_t>(n), std::vector<std::uint8_t>(static_cast<size_t>(n), 0));
  for (int t = 0; t < n; ++t) {
    for (const auto& node : j[static_cast<size_t>(t)]) {
      const int i = node.get<int>();
      if (i < 0 || i >= n)
        throw std::runtime_error("a schedule names a node outside the graph");
      m[t][i] = 1;
    }
  }
  return m;
}

SolveStatus status_from(const std::string& name) {
  for (auto s : {SolveStatus::Optimal, SolveStatus::Feasible, SolveStatus::Rounded}) {
    if (name == solve_status_name(s))
      return s;
  }
  throw std::runtime_error("unknown status '" + name + "'");
}

}  // namespace

void save_solution(const std::filesystem::path& path, const Graph& graph, int64_t budget_bytes,
                   const Solution& solution) {
  TS_CHECK(solution.has_schedule(), "only a solution with a schedule can be cached, not one with status '{}'",
           solve_status_name(solution.status));
  const nlohmann::json j = {
      {"format", kFormat},
      {"fingerprint", graph_fingerprint(graph)},
      {"nodes", graph.size()},
      {"budget_bytes", budget_bytes},
      {"status", solve_status_name(solution.status)},
      {"cost", solution.cost},
      {"peak_bytes", solution.peak_bytes},
      {"solve_seconds", solution.solve_seconds},
      {"R", stages(solution.schedule.R)},
      {"S", stages(solution.schedule.S)},
  };
  // Named by the process: the ranks of a run may write the same solution at once.
  auto tmp = path;
  tmp += fmt::format(".{}.tmp", ::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    TS_CHECK(out.good(), "cannot write the rematerialization cache file {}", tmp.string());
    out << j.dump(1) << '\n';
    out.close();
    TS_CHECK(!out.fail(), "writing the rematerialization cache file {} failed (disk full?)", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  TS_CHECK(!ec, "cannot move {} to {}: {}", tmp.string(), path.string(), ec.message());
}

std::optional<Solution> load_solution(const std::filesystem::path& path, const Graph& graph, int64_t budget_bytes) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return std::nullopt;
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot read the rematerialization cache file {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  Solution out;
  try {
    const auto j = nlohmann::json::parse(text.str());
    if (j.at("format").get<std::string>() != kFormat)
      throw std::runtime_error("not the format " + std::string(kFormat));
    if (j.at("fingerprint").get<std::string>() != graph_fingerprint(graph) ||
        j.at("budget_bytes").get<int64_t>() != budget_bytes) {
      return std::nullopt;
    }
    const int n = j.at("nodes").get<int>();
    if (n != graph.size())
      throw std::runtime_error("its node count differs from the graph of its fingerprint");
    out.status = status_from(j.at("status").get<std::string>());
    out.cost = j.at("cost").get<double>();
    out.peak_bytes = j.at("peak_bytes").get<int64_t>();
    out.solve_seconds = j.at("solve_seconds").get<double>();
    out.schedule.R = matrix(j.at("R"), n);
    out.schedule.S = matrix(j.at("S"), n);
  } catch (const std::exception& e) {
    TS_FAIL(
        "the rematerialization cache file {} is corrupt: {}; delete it to "
        "solve again",
        path.string(), e.what());
  }
  ScheduleCost sim;
  try {
    sim = simulate_schedule(graph, out.schedule);
  } catch (const Error& e) {
    TS_FAIL(
        "the rematerialization cache file {} is corrupt: its schedule is "
        "invalid ({}); delete it to solve again",
        path.string(), e.what());
  }
  TS_CHECK(sim.peak_bytes == out.peak_bytes && sim.peak_bytes <= budget_bytes &&
               std::abs(sim.cost - out.cost) <= 1e-9 * std::max(1.0, std::abs(sim.cost)),
           "the rematerialization cache file {} is corrupt: its schedule "
           "simulates to cost {} and peak {} bytes, not "
           "the recorded {} and {} within {} bytes; delete it to solve again",
           path.string(), sim.cost, sim.peak_bytes, out.cost, out.peak_bytes, budget_bytes);
  return out;
}

}  // namespace tessera::memory::remat
