#include "dist/job_status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/atomic_file.h"
#include "dist/startup_guard.h"

namespace fs = std::filesystem;

namespace tessera::dist {

namespace {

std::string outcome_name(int rank) { return fmt::format("outcome.{}", rank); }
std::string mark_name(JobStatus::Mark what, int rank) {
  return fmt::format("{}.{}", what == JobStatus::Mark::TakesStopRequests ? "takes_stops" : "reached_mpi", rank);
}

}  // namespace

std::optional<JobStatus> JobStatus::of_this_process() {
  const char* dir = std::getenv(kJobStatusVariable);
  const int rank = launcher_rank();
  if (dir == nullptr || *dir == 0 || rank < 0) return std::nullopt;
  return JobStatus(dir, rank);
}

void JobStatus::record_outcome(int exit_code, const std::string& message) const {
  // The first line is the code, the rest the message: written whole, so a reader never sees half.
  write_file_atomically(fs::path(dir_) / outcome_name(rank_), fmt::format("{}\n{}", exit_code, message));
}

void JobStatus::mark(Mark what) const { write_file_atomically(fs::path(dir_) / mark_name(what, rank_), ""); }

std::vector<RankOutcome> JobStatus::outcomes() const {
  std::vector<RankOutcome> all;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("outcome.")) continue;
    RankOutcome o;
    try {
      o.rank = std::stoi(name.substr(8));
    } catch (const std::exception&) {
      continue;
    }
    std::ifstream in(e.path());
    std::string first;
    if (!std::getline(in, first)) continue;
    try {
      o.exit_code = std::stoi(first);
    } catch (const std::exception&) {
      continue;
    }
    std::stringstream rest;
    rest << in.rdbuf();
    o.message = rest.str();
    all.push_back(std::move(o));
  }
  std::sort(all.begin(), all.end(), [](const RankOutcome& a, const RankOutcome& b) { return a.rank < b.rank; });
  return all;
}

std::vector<int> JobStatus::ranks_without(Mark what, int size) const {
  std::vector<int> missing;
  std::error_code ec;
  for (int r = 0; r < size; ++r) {
    if (!fs::exists(fs::path(dir_) / mark_name(what, r), ec)) missing.push_back(r);
  }
  return missing;
}

int job_exit_code(const std::vector<RankOutcome>& outcomes) {
  int code = 0;
  const auto rank_of = [](int c) { return c == 0 ? 0 : c == 3 ? 1 : c == 2 ? 2 : 3; };
  for (const RankOutcome& o : outcomes) {
    if (rank_of(o.exit_code) > rank_of(code)) code = o.exit_code;
  }
  return code;
}

std::vector<std::string> messages_to_repeat(const std::vector<RankOutcome>& outcomes) {
  std::string said;
  for (const RankOutcome& o : outcomes) {
    if (o.rank == 0) said = o.message;
  }
  std::map<std::string, std::vector<int>> by_text;
  std::vector<std::string> order;
  for (const RankOutcome& o : outcomes) {
    if (o.rank == 0 || o.message.empty() || o.message == said) continue;
    if (!by_text.contains(o.message)) order.push_back(o.message);
    by_text[o.message].push_back(o.rank);
  }
  std::vector<std::string> lines;
  for (const std::string& text : order) {
    const std::vector<int>& ranks = by_text[text];
    lines.push_back(fmt::format("{} {}: {}", ranks.size() == 1 ? "rank" : "ranks", describe_ranks(ranks), text));
  }
  return lines;
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += j == i ? fmt::format("{}", ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace tessera::dist
