// Trains the configurations of the covering array (config/covering_array.h) through the real
// program and holds each against its one-process reference: `tessera launch -n <world> -- train`
// with the configuration's settings on a tiny prepared dataset, against `tessera train` of the
// configuration's reference settings on the same data. Exact configurations match every loss within
// 1e-5 and the final parameters within 1e-4 (relative above 1), as the parity tests do; lossy ones
// every loss within their parity test's bound. Prints one line per configuration and a summary;
// exits 1 when any configuration fails, naming it and its error.
//
//   covering_array_run ci           the CI subset (ctest train_covering_array_ci)
//   covering_array_run all          every configuration (scripts/matrix.sh)
//   covering_array_run 3 17         configurations 3 and 17
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "io/safetensors.h"
#include "train/array_run.h"

namespace fs = std::filesystem;
using namespace tessera;
using namespace tessera::testing;

namespace {

struct Run {
  std::vector<double> losses;
  fs::path model;  // the last checkpoint's model.safetensors
  std::string output;
  std::string error;
};

// The policies that plan under memory.activation_budget_mb, where activations stay in compute
// memory. Offloaded ones ("nvme", or "auto", planned with the policy) leave the budget for what
// offloading does not take, and the array's budget makes them offload.
bool planned_policy(const config::FeatureSettings& s) {
  return config::recompute_takes_budget(s.recompute) &&
         s.offload_activations == "none";
}

// " --memory.activation_budget_mb <b>" with b a little above the least budget the policy can
// schedule on this configuration's ranks, which the program names when given less: there the
// policy must recompute, where the array's fixed budget may hold every activation of a small rank.
std::string budget_just_above_the_least(const std::string& command, const fs::path& out, std::string& error) {
  fs::remove_all(out);
  const CliResult probe = run_tessera(command + " --train.steps 1 --memory.activation_budget_mb 0.001");
  double least = 0.0;
  const std::string marker = "is below the ";
  for (size_t at = probe.output.find(marker); at != std::string::npos; at = probe.output.find(marker, at + 1)) {
    least = std::max(least, std::strtod(probe.output.c_str() + at + marker.size(), nullptr));
  }
  if (probe.exit_code == 0 || least <= 0.0) {
    error = "the program named no least budget for a budget of 0.001 MiB:\n" + probe.output;
    return "";
  }
  // The message rounds to hundredths.
  return fmt::format(" --memory.activation_budget_mb {:.2f}", least + 0.02);
}

std::string flags_of(const config::FeatureSettings& s) {
  std::string out;
  for (const auto& [key, value] : train::array_run_overrides(s)) out += fmt::format(" --{} {}", key, value);
  return out;
}

fs::path last_model(const fs::path& out) {
  fs::path best;
  if (!fs::exists(out / "checkpoints")) return best;
  for (const auto& entry : fs::directory_iterator(out / "checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step_", 0) == 0 && fs::exists(entry.path() / "model.safetensors") &&
        (best.empty() || name > best.parent_path().filename().string())) {
      best = entry.path() / "model.safetensors";
    }
  }
  return best;
}

Run run_training(const std::string& command, const fs::path& out) {
  fs::remove_all(out);
  const CliResult r = run_tessera(command);
  Run run;
  run.output = r.output;
  if (r.exit_code != 0) {
    run.error = fmt::format("exit {}:\n{}", r.exit_code, r.output);
    return run;
  }
  run.losses = train_losses_of((out / "metrics.jsonl").string());
  run.model = last_model(out);
  if (run.model.empty()) run.error = "no checkpoint with model.safetensors in " + out.string();
  return run;
}

std::vector<float> floats_of(const io::SafeTensorsFile& file, const std::string& name) {
  const io::SafeTensorEntry& e = file.entry(name);
  std::vector<float> out(e.bytes / sizeof(float));
  if (e.dtype == DType::F32) std::memcpy(out.data(), e.data, out.size() * sizeof(float));
  return out;
}

// The worst relative difference of the two files' parameters (relative above 1), or an error.
std::string compare_parameters(const fs::path& got_path, const fs::path& want_path, double bound, double& worst) {
  const io::SafeTensorsFile got = io::SafeTensorsFile::open(got_path.string());
  const io::SafeTensorsFile want = io::SafeTensorsFile::open(want_path.string());
  if (got.names() != want.names()) return "the checkpoints hold different parameters";
  worst = 0.0;
  std::string worst_name;
  for (const std::string& name : want.names()) {
    if (got.entry(name).dtype != DType::F32 || want.entry(name).dtype != DType::F32) {
      return fmt::format("{} is not f32 in both checkpoints", name);
    }
    const std::vector<float> a = floats_of(got, name), b = floats_of(want, name);
    if (a.size() != b.size()) return fmt::format("{} has {} elements, the reference's {}", name, a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i])));
      if (!(d <= worst)) {
        worst = std::isnan(d) ? INFINITY : d;
        worst_name = name;
      }
    }
  }
  if (worst > bound) return fmt::format("parameter {} differs by {:.3g} (bound {:.0e})", worst_name, worst, bound);
  return "";
}

std::string compare_losses(const std::vector<double>& got, const std::vector<double>& want, double bound,
                           double& worst) {
  if (got.size() != want.size() || want.empty()) {
    return fmt::format("{} train losses logged, the reference {}", got.size(), want.size());
  }
  worst = 0.0;
  size_t worst_step = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(got[i] - want[i]) / std::abs(want[i]);
    if (!(d <= worst)) {
      worst = std::isnan(d) ? INFINITY : d;
      worst_step = i + 1;
    }
  }
  if (worst > bound) {
    return fmt::format("step {} loss {} against the reference's {}: {:.3g} relative (bound {:.0e})", worst_step,
                       got[worst_step - 1], want[worst_step - 1], worst, bound);
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: covering_array_run ci | all | <configuration id>...\n");
    return 2;
  }
  // The jobs run under mpirun, whose allocations outlive MPI_Finalize (as for every MPI test).
  ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
  const std::vector<config::ArrayConfiguration> array = train::checked_covering_array();
  std::vector<const config::ArrayConfiguration*> chosen;
  const std::string tier = argv[1];
  for (const config::ArrayConfiguration& c : array) {
    bool take = tier == "all" || (tier == "ci" && c.ci);
    for (int i = 1; i < argc && !take; ++i) take = std::strtol(argv[i], nullptr, 10) == c.id;
    if (take) chosen.push_back(&c);
  }
  if (chosen.empty()) {
    fmt::print(stderr, "no configuration of the {} matches '{}'\n", array.size(), tier);
    return 2;
  }

  const auto started = std::chrono::steady_clock::now();
  const fs::path root = fs::temp_directory_path() / fmt::format("tessera_matrix_{}", ::getpid());
  const fs::path dataset = root / "data";
  const CliResult prepared = prepare_test_dataset(root.string(), 40000, 300);
  if (prepared.exit_code != 0) {
    fmt::print(stderr, "preparing the dataset failed:\n{}\n", prepared.output);
    return 1;
  }
  const auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  const std::string common = " --data.dir " + dataset.string() + " --log.progress plain --log.every 1";

  std::map<std::string, Run> references;  // by the reference's flags: configurations share them
  std::vector<std::string> failures;
  for (const config::ArrayConfiguration* c : chosen) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string ref_flags = flags_of(config::array_reference(c->settings));
    if (!references.contains(ref_flags)) {
      const fs::path out = root / fmt::format("reference_{}", references.size() + 1);
      references[ref_flags] = run_training("train --train.out_dir " + out.string() + common + ref_flags, out);
    }
    const Run& want = references[ref_flags];
    const fs::path out = root / fmt::format("configuration_{}", c->id);
    std::string command = fmt::format("launch -n {} -- train --train.out_dir {}{}{}", c->world, out.string(), common,
                                      flags_of(c->settings));
    const bool budgeted = planned_policy(c->settings);
    std::string budget_error;
    if (budgeted) command += budget_just_above_the_least(command, out, budget_error);
    const config::ArrayTolerance tolerance = config::array_tolerance(c->settings);
    const double bound = config::array_loss_bound(tolerance);
    std::string error = want.error.empty() ? "" : "the reference run failed: " + want.error;
    if (error.empty()) error = budget_error;
    double loss_worst = 0.0, param_worst = 0.0;
    if (error.empty()) {
      const Run got = run_training(command, out);
      error = got.error;
      if (error.empty() && budgeted && got.output.find(": 0 unit forwards recomputed per step") != std::string::npos) {
        error = fmt::format("memory.recompute = \"{}\" recomputed nothing at its budget",
                            config::recompute_policy_name(c->settings.recompute));
      }
      if (error.empty()) error = compare_losses(got.losses, want.losses, bound, loss_worst);
      if (error.empty() && tolerance == config::ArrayTolerance::Exact) {
        error = compare_parameters(got.model, want.model, 1e-4, param_worst);
      }
      // A lossy setting that equals the reference bit for bit did not act (a compressor still warming
      // up, say): the run would prove nothing about it.
      if (error.empty() && tolerance != config::ArrayTolerance::Exact) {
        error = compare_parameters(got.model, want.model, INFINITY, param_worst);
        if (error.empty() && param_worst == 0.0) {
          error = "the parameters equal the reference's bit for bit: the lossy setting did not act";
        }
      }
    }
    const std::string head =
        fmt::format("configuration {} ({} processes, {} pairs first):", c->id, c->world, c->first_covered.size());
    if (error.empty()) {
      fmt::print("{} ok in {:.1f} s; losses within {:.2g} (bound {:.0e}), parameters within {:.2g}{}\n", head,
                 seconds_since(t0), loss_worst, bound, param_worst,
                 tolerance == config::ArrayTolerance::Exact ? " (bound 1e-4)" : " (not bounded: lossy)");
    } else {
      fmt::print("{} FAILED in {:.1f} s\n  tessera {}\n  {}\n", head, seconds_since(t0), command, error);
      failures.push_back(fmt::format("configuration {}", c->id));
    }
    std::fflush(stdout);
  }
  fmt::print("{} of {} configurations trained like their references ({} one-process references) in {:.0f} s{}\n",
             chosen.size() - failures.size(), chosen.size(), references.size(), seconds_since(started),
             failures.empty() ? "" : "; failed: " + fmt::format("{}", fmt::join(failures, ", ")));
  if (failures.empty()) fs::remove_all(root);
  return failures.empty() ? 0 : 1;
}
