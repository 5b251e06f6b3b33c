#pragma once
// What a run's metrics log says about its past, for a resumed run: the losses to redraw the chart
// from, the wall time already spent, and the lines of steps a resume undoes.
#include <cstdint>
#include <string>

#include "data/token_file.h"
#include "io/loss_chart.h"

namespace tessera::train {

struct RunHistory {
  io::Series train{"train loss", "#1f77b4", {}, {}, false};
  io::Series val{"val loss", "#d62728", {}, {}, true};
  double elapsed_seconds = 0;  // of the last train line kept
};

// The history of the steps up to `upto` in the metrics file at `path` (empty when it is missing;
// lines that do not parse are skipped: the log is a record, not an input that must be perfect).
RunHistory reload_history(const std::string& path, int64_t upto);

// Drops the lines of steps after `upto` (a run that went on past the checkpoint being resumed), so
// the log tells one consistent history.
void truncate_history(const std::string& path, int64_t upto);

// Entropy (nats) of the token distribution of the training data: the loss of a model that knows
// only how often each token occurs. A model that learned anything beats it.
double unigram_entropy(const data::TokenFile& file, int64_t vocab);

}  // namespace tessera::train
