#include "train/array_run.h"

#include <toml++/toml.h>

#include "core/check.h"

namespace tessera::train {

std::vector<std::pair<std::string, std::string>> array_run_overrides(const config::FeatureSettings& s) {
  std::vector<std::pair<std::string, std::string>> out = {
      {"model.n_layer", "4"},          {"model.n_head", "2"},          {"model.n_embd", "32"},
      {"model.seq_len", "32"},         {"model.vocab_size", "300"},    {"train.steps", "6"},
      {"train.batch_size", "8"},       {"train.micro_batch_size", "1"}, {"train.eval_every", "0"},
      {"optim.warmup_steps", "2"},     {"parallel.bucket_mb", "0.01"},
  };
  for (auto& kv : config::array_overrides(s)) out.push_back(std::move(kv));
  return out;
}

RunConfig array_run_config(const config::FeatureSettings& s) {
  toml::table table;
  apply_overrides(table, array_run_overrides(s));
  RunConfig c = read_run_config(table, config::array_world(s));
  c.validate();
  return c;
}

bool array_settings_run(const config::FeatureSettings& s) {
  try {
    array_run_config(s);
  } catch (const Error&) {
    return false;
  }
  return true;
}

std::vector<config::ArrayConfiguration> checked_covering_array() {
  return config::covering_array(array_settings_run);
}

}  // namespace tessera::train
