#pragma once
// What a resumed run changes of the config its checkpoint was saved with. Every difference is
// said at start; one that changes the optimization — the learning rate and the other optimizer
// settings, the schedule's length, the global batch, gradient compression — is refused unless
// train.allow_changes, since the run would silently stop being the one it continues. The layout
// (parallel.dp, tp, pp, ...), recomputation, logging and the like may change freely: a resumed
// run is the same run under them.
#include <string>
#include <vector>

namespace tessera::train {

struct ConfigChange {
  std::string key;  // dotted, "optim.lr"
  std::string saved, now;
  bool changes_optimization = false;
};

// The keys whose values differ between two resolved configs (to_toml), in key order; keys that
// only steer this process (checkpoint.resume, train.exit_after, train.max_minutes,
// train.overwrite, train.allow_changes) are left out.
std::vector<ConfigChange> config_changes(const std::string& saved_toml, const std::string& now_toml);

// "optim.lr 0.002 -> 0.01, train.steps 600 -> 800"
std::string describe_changes(const std::vector<ConfigChange>& changes);

}  // namespace tessera::train
