#include "data/loader.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/check.h"
#include "data/window_order.h"

namespace tessera::data {

RowRange split_rows(int64_t total, int64_t part, int64_t parts) {
  TS_CHECK(parts >= 1 && part >= 0 && part < parts, "part {} of {} is out of range", part, parts);
  TS_CHECK(total >= parts, "{} rows cannot be split into {} non-empty parts; make the batch at least {}", total, parts,
           parts);
  return RowRange{part * total / parts, (part + 1) * total / parts};
}

nlohmann::json to_json(const LoaderState& state) {
  return nlohmann::json{{"sequences", state.sequences}, {"steps", state.steps}, {"seed", state.seed},
                        {"seq_len", state.seq_len}, {"tokens", state.tokens}, {"shuffle", state.shuffle}};
}

LoaderState loader_state_from_json(const nlohmann::json& j) {
  TS_CHECK(j.is_object(), "the saved data position is {}, expected an object of the loader's fields; the checkpoint is "
           "damaged", j.type_name());
  auto field = [&](const char* key) -> const nlohmann::json& {
    TS_CHECK(j.contains(key) && !j.at(key).is_null(),
             "the saved data position has no \"{}\"; the checkpoint is incomplete", key);
    return j.at(key);
  };
  // nlohmann converts -3 to a huge unsigned and 2.5 to 2 without a word, so the types are checked
  // here: a position that is not a count is refused, not reinterpreted.
  auto count = [&](const char* key, uint64_t max) -> uint64_t {
    const nlohmann::json& v = field(key);
    const bool ok = v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0);
    TS_CHECK(ok && v.get<uint64_t>() <= max, "the saved data position's \"{}\" must be a non-negative integer, got {}",
             key, v.dump());
    return v.get<uint64_t>();
  };
  constexpr uint64_t kAny = std::numeric_limits<uint64_t>::max();
  constexpr auto kInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  LoaderState s;
  s.sequences = count("sequences", kAny);
  s.steps = count("steps", kAny);
  s.seed = count("seed", kAny);
  s.seq_len = static_cast<int64_t>(count("seq_len", kInt64));
  s.tokens = static_cast<int64_t>(count("tokens", kInt64));
  const nlohmann::json& shuffle = field("shuffle");
  TS_CHECK(shuffle.is_boolean(), "the saved data position's \"shuffle\" must be true or false, got {}", shuffle.dump());
  s.shuffle = shuffle.get<bool>();
  return s;
}

TokenLoader::TokenLoader(std::shared_ptr<const TokenFile> file, LoaderOptions options)
    : file_(std::move(file)), options_(options) {
  TS_CHECK(file_ != nullptr, "the loader needs a token file");
  TS_CHECK(options_.seq_len >= 1, "seq_len must be at least 1, got {}", options_.seq_len);
  TS_CHECK(options_.global_batch >= 1, "the global batch must hold at least 1 sequence, got {}", options_.global_batch);
  TS_CHECK(file_->size() >= options_.seq_len + 1,
           "token file {} has {} tokens, fewer than seq_len + 1 = {} that one sequence and its next-token "
           "targets need; use a larger corpus or a shorter seq_len",
           file_->path().string(), file_->size(), options_.seq_len + 1);
  windows_ = (file_->size() - 1) / options_.seq_len;
  state_.seed = options_.seed;
  state_.seq_len = options_.seq_len;
  state_.tokens = file_->size();
  state_.shuffle = options_.shuffle;
}

int64_t TokenLoader::window_start(uint64_t sequence) const {
  const auto w = static_cast<uint64_t>(windows_);
  const uint64_t epoch = sequence / w;
  const uint64_t position = sequence % w;
  const uint64_t window = options_.shuffle ? WindowOrder(w, options_.seed, epoch)(position) : position;
  return static_cast<int64_t>(window) * options_.seq_len;
}

void TokenLoader::fill(int64_t begin, int64_t count, std::span<int32_t> inputs, std::span<int32_t> targets) const {
  const int64_t t = options_.seq_len;
  TS_CHECK(begin >= 0 && count >= 0 && begin + count <= options_.global_batch,
           "rows [{}, {}) are outside the global batch of {} sequences", begin, begin + count, options_.global_batch);
  TS_CHECK(static_cast<int64_t>(inputs.size()) == count * t && static_cast<int64_t>(targets.size()) == count * t,
           "batch buffers hold {} and {} ids but {} rows of seq_len {} need {} each", inputs.size(), targets.size(),
           count, t, count * t);
  std::vector<int32_t> window(static_cast<size_t>(t + 1));
  for (int64_t row = 0; row < count; ++row) {
    file_->read(window_start(state_.sequences + static_cast<uint64_t>(begin + row)), window);
    const auto offset = static_cast<size_t>(row * t);
    std::copy(window.begin(), window.end() - 1, inputs.begin() + static_cast<std::ptrdiff_t>(offset));
    std::copy(window.begin() + 1, window.end(), targets.begin() + static_cast<std::ptrdiff_t>(offset));
  }
}

Batch TokenLoader::rows(int64_t begin, int64_t count) const {
  Batch b;
  b.rows = count;
  b.seq_len = options_.seq_len;
  b.inputs.resize(static_cast<size_t>(count * options_.seq_len));
  b.targets.resize(b.inputs.size());
  fill(begin, count, b.inputs, b.targets);
  return b;
}

Batch TokenLoader::shard(int64_t rank, int64_t ranks) const {
  const RowRange r = split_rows(options_.global_batch, rank, ranks);
  return rows(r.begin, r.size());
}

Batch TokenLoader::microbatch(int64_t rank, int64_t ranks, int64_t micro, int64_t micros) const {
  const RowRange r = split_rows(options_.global_batch, rank, ranks);
  const RowRange m = split_rows(r.size(), micro, micros);
  return rows(r.begin + m.begin, m.size());
}

void TokenLoader::advance() {
  state_.sequences += static_cast<uint64_t>(options_.global_batch);
  state_.steps += 1;
}

Batch TokenLoader::next() {
  Batch b = global_batch();
  advance();
  return b;
}

void TokenLoader::restore(const LoaderState& state) {
  TS_CHECK(state.tokens == state_.tokens && state.seq_len == state_.seq_len,
           "the saved data position belongs to a token file of {} tokens read with seq_len {}, but this loader reads "
           "{} ({} tokens) with seq_len {}; resume with the same data and seq_len",
           state.tokens, state.seq_len, file_->path().string(), state_.tokens, state_.seq_len);
  TS_CHECK(state.seed == state_.seed && state.shuffle == state_.shuffle,
           "the saved data position was made with seed {} (shuffle {}), but this loader has seed {} (shuffle {}); "
           "resume with the same data seed",
           state.seed, state.shuffle, state_.seed, state_.shuffle);
  state_ = state;
}

}  // namespace tessera::data
