// Checkpoints that cannot be edited into nonsense: every manifest field checked and named, the
// manifest's own checksum, version-1 manifests, resolving what to resume, and saves that fail
// cleanly. Real checkpoints are saved from a tiny model in this process.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>
#include <deque>
#include <functional>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "nn/gpt.h"
#include "optim/adamw.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Expects `body` to throw tessera::Error whose message holds every part.
void expect_error(const std::function<void()>& body, std::initializer_list<std::string> parts, const std::string& what) {
  try {
    body();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << what << ": lacks '" << part << "' in: " << e.what();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": not a tessera::Error: " << e.what();
  }
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("tessera_checkpoint_{}_{}", ::getpid(),
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    config_.model.n_layer = 1;
    config_.model.n_head = 2;
    config_.model.n_embd = 16;
    config_.model.vocab_size = 64;
    config_.model.seq_len = 8;
    config_.train.seed = 7;
    model_.emplace(config_.model, memory_, 7);
    optimizer_.emplace(memory_, optim::AdamWConfig{}, model_->parameters().numel());
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  ModelState state() {
    return {model_->parameters(), model_->parameters(), &*optimizer_, {{0, model_->parameters().numel()}}};
  }
  CheckpointState at_step(int64_t step, double elapsed = 0) const {
    data::LoaderState position;
    position.sequences = static_cast<uint64_t>(4 * step);
    position.steps = static_cast<uint64_t>(step);
    position.seed = 7;
    position.seq_len = 8;
    position.tokens = 1000;
    return CheckpointState{step, data::to_json(position), 7, {2.5, 2.25}, elapsed, std::nullopt, std::nullopt};
  }
  std::string save(CheckpointStore& store, int64_t step, double elapsed = 0) {
    return store.save(config_, at_step(step, elapsed), state(), "");
  }

  fs::path dir_;
  RunConfig config_;
  MemoryAccountant memory_;
  std::optional<nn::GPT> model_;
  std::optional<optim::AdamW> optimizer_;
};

// A manifest's JSON without its self-checksum, to edit and re-sign.
json unsigned_manifest(const fs::path& checkpoint) {
  json j = json::parse(read_text(checkpoint / "manifest.json"));
  j.erase("manifest_xxh3");
  return j;
}

TEST_F(Checkpoint, SavedManifestIsVersion3WithItsOwnChecksumAndElapsedTime) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  const std::string path = save(store, 3, 123.25);
  const json j = json::parse(read_text(fs::path(path) / "manifest.json"));
  EXPECT_EQ(j.at("version"), 3);
  EXPECT_EQ(j.at("manifest_xxh3").get<std::string>().size(), 16u);
  const CheckpointManifest m = read_checkpoint_manifest(path);
  EXPECT_EQ(m.state.step, 3);
  EXPECT_EQ(m.state.elapsed_seconds, 123.25);
  EXPECT_EQ(m.state.val_history, (std::vector<double>{2.5, 2.25}));

  // And through a full load into the model and optimizer.
  const LoadedCheckpoint loaded = load_checkpoint(path, config_, state());
  EXPECT_EQ(loaded.state.elapsed_seconds, 123.25);
  EXPECT_EQ(loaded.state.step, 3);
  EXPECT_EQ(loaded.state.seed, 7u);
  EXPECT_EQ(data::loader_state_from_json(loaded.state.data_position).sequences, 12u);
  EXPECT_EQ(checkpoint_run_config(m, path).train.seed, 7u);
}

// fp16's loss scale travels in the manifest, and only where the run had one.
TEST_F(Checkpoint, TheLossScaleOfAnFp16RunRoundTrips) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  EXPECT_FALSE(read_checkpoint_manifest(save(store, 2)).state.loss_scale.has_value());
  CheckpointState scaled = at_step(3);
  scaled.loss_scale = memory::LossScaler::State{2048, 17, 2};
  const std::string path = store.save(config_, scaled, state(), "");
  const CheckpointManifest m = read_checkpoint_manifest(path);
  ASSERT_TRUE(m.state.loss_scale.has_value());
  EXPECT_EQ(*m.state.loss_scale, (memory::LossScaler::State{2048, 17, 2}));
}

TEST_F(Checkpoint, EveryFieldEditedIntoNonsenseIsRefusedNamingTheField) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  const fs::path path = save(store, 3);
  const json good = unsigned_manifest(path);
  struct Edit {
    std::string field;  // as the message names it
    std::function<void(json&)> apply;
  };
  const std::vector<Edit> edits = {
      {"step", [](json& j) { j["step"] = 1; }},  // not the step its folder is named for
      {"step", [](json& j) { j["step"] = -3; }},
      {"step", [](json& j) { j["step"] = 3.5; }},
      {"step", [](json& j) { j["step"] = "3"; }},
      {"step", [](json& j) { j["step"] = nullptr; }},
      {"step", [](json& j) { j.erase("step"); }},
      {"seed", [](json& j) { j["seed"] = -7; }},
      {"seed", [](json& j) { j["seed"] = "seven"; }},
      {"data_position", [](json& j) { j["data_position"] = json::array(); }},
      {"data_position", [](json& j) { j["data_position"]["sequences"] = -12; }},
      {"data_position", [](json& j) { j["data_position"]["tokens"] = 1.5; }},
      {"data_position", [](json& j) { j["data_position"].erase("seq_len"); }},
      {"data_position", [](json& j) { j["data_position"]["shuffle"] = "yes"; }},
      {"data_position.steps", [](json& j) { j["data_position"]["steps"] = 9; }},
      {"data_position.seed", [](json& j) { j["data_position"]["seed"] = 8; }},
      {"data_position.sequences", [](json& j) { j["data_position"]["sequences"] = 2; }},
      {"val_history", [](json& j) { j["val_history"] = "low"; }},
      {"val_history", [](json& j) { j["val_history"] = json::array({1.0, "x"}); }},
      {"elapsed_seconds", [](json& j) { j["elapsed_seconds"] = -1.0; }},
      {"elapsed_seconds", [](json& j) { j.erase("elapsed_seconds"); }},
      {"model", [](json& j) { j["model"] = 4; }},
      {"model.arch", [](json& j) { j["model"]["arch"] = "rnn"; }},
      {"model.n_layer", [](json& j) { j["model"]["n_layer"] = 0; }},
      {"model.n_embd", [](json& j) { j["model"]["n_embd"] = "16"; }},
      {"model.vocab_size", [](json& j) { j["model"]["vocab_size"] = int64_t{1} << 40; }},
      {"model.bias", [](json& j) { j["model"]["bias"] = 1; }},
      {"model.tied_embeddings", [](json& j) { j["model"].erase("tied_embeddings"); }},
      {"parameter_count", [](json& j) { j["parameter_count"] = -5; }},
      {"optimizer", [](json& j) { j["optimizer"] = nullptr; }},
      {"optimizer.name", [](json& j) { j["optimizer"]["name"] = 3; }},
      {"optimizer.steps_taken", [](json& j) { j["optimizer"]["steps_taken"] = -1; }},
      {"optimizer.steps_taken", [](json& j) { j["optimizer"]["steps_taken"] = 4; }},  // above the step
      {"parallel.dp", [](json& j) { j["parallel"]["dp"] = 0; }},
      {"parallel.zero_stage", [](json& j) { j["parallel"]["zero_stage"] = 4; }},
      {"parallel.zero_stage", [](json& j) { j["parallel"]["zero_stage"] = -1; }},
      {"parallel.ranks", [](json& j) { j["parallel"].erase("ranks"); }},
      {"config", [](json& j) { j["config"] = json::object(); }},
      {"config", [](json& j) { j["config"] = ""; }},
      {"files", [](json& j) { j["files"] = json::object(); }},  // which would turn every checksum off
      {"files", [](json& j) { j["files"] = json::array(); }},
      {"files", [](json& j) { j["files"].erase("model.safetensors"); }},
      {"files", [](json& j) { j["files"].erase("optimizer.rank00000.safetensors"); }},
      {"files", [](json& j) { j["parallel"]["ranks"] = 2; }},  // two ranks without a shard each
      {"files.model.safetensors.bytes", [](json& j) { j["files"]["model.safetensors"]["bytes"] = -1; }},
      {"files.model.safetensors.xxh3", [](json& j) { j["files"]["model.safetensors"]["xxh3"] = 12; }},
      {"files.model.safetensors.xxh3", [](json& j) { j["files"]["model.safetensors"]["xxh3"] = "not-hex"; }},
      {"files.model.safetensors", [](json& j) { j["files"]["model.safetensors"] = "big"; }},
      {"files.../model.safetensors", [](json& j) { j["files"]["../model.safetensors"] = {{"bytes", 1}, {"xxh3", "0000000000000000"}}; }},
      {"loss_scale", [](json& j) { j["loss_scale"] = 65536; }},
      {"loss_scale.scale", [](json& j) { j["loss_scale"] = {{"scale", 0.25}, {"finite_steps", 0}, {"skipped_steps", 0}}; }},
      {"loss_scale.scale", [](json& j) { j["loss_scale"] = {{"finite_steps", 0}, {"skipped_steps", 0}}; }},
      {"loss_scale.finite_steps", [](json& j) { j["loss_scale"] = {{"scale", 8}, {"finite_steps", -1}, {"skipped_steps", 0}}; }},
      {"loss_scale.skipped_steps", [](json& j) { j["loss_scale"] = {{"scale", 8}, {"finite_steps", 0}, {"skipped_steps", 4}}; }},  // above the step
  };
  const std::string manifest = (path / "manifest.json").string();
  for (const Edit& edit : edits) {
    json j = good;
    edit.apply(j);
    // Re-signed, so that the field check (not the checksum) must refuse it.
    write_text(path / "manifest.json", checkpoint_manifest_text(j));
    expect_error([&] { read_checkpoint_manifest(path.string()); }, {manifest, "field '" + edit.field + "'"},
                 edit.field + " in " + j.dump());
  }
  // Structural damage: not JSON, not an object, another format, another version.
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"{\"step\": ", "not valid JSON"},
      {"[1, 2]", "expected an object"},
      {"{\"format\": \"other\"}", "not a tessera checkpoint manifest"},
      // Printing or hashing a value this deep overflowed the stack (found reviewing the fuzz targets).
      {"{\"format\": \"tessera-checkpoint\", \"version\": 2, \"step\": " + std::string(200000, '[') +
           std::string(200000, ']') + "}",
       "nests JSON more than 64 levels"},
  };
  for (const auto& [text, part] : damaged) {
    write_text(path / "manifest.json", text);
    expect_error([&] { read_checkpoint_manifest(path.string()); }, {manifest, part}, text);
  }
  for (const json& version : {json(4), json("3"), json(0), json(nullptr)}) {
    json j = good;
    j["version"] = version;
    write_text(path / "manifest.json", checkpoint_manifest_text(j));
    expect_error([&] { read_checkpoint_manifest(path.string()); }, {manifest, "version"}, version.dump());
  }
  // The good manifest, re-signed, still loads: the edits above were refused for what they changed.
  write_text(path / "manifest.json", checkpoint_manifest_text(good));
  EXPECT_NO_THROW(load_checkpoint(path.string(), config_, state()));
}

TEST_F(Checkpoint, AManifestEditedByHandIsRefusedByItsChecksum) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  const fs::path path = save(store, 3);
  const std::string text = read_text(path / "manifest.json");
  // Plausible edits a person might make, each valid JSON that passes every other check.
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"steps_taken\": 0", "\"steps_taken\": 1"},
      {"2.25", "1.25"},                    // a validation loss
      {"\"elapsed_seconds\": 0.0", "\"elapsed_seconds\": 10.0"},
      {"lr = 0.001", "lr = 0.002"},        // inside the saved config
  };
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << text;
    std::string edited = text;
    edited.replace(at, from.size(), to);
    write_text(path / "manifest.json", edited);
    expect_error([&] { read_checkpoint_manifest(path.string()); },
                 {(path / "manifest.json").string(), "was modified after it was saved"}, from);
  }
  // Only the formatting changed: the same content, still accepted.
  write_text(path / "manifest.json", json::parse(text).dump(4));
  EXPECT_NO_THROW(read_checkpoint_manifest(path.string()));
}

// A one-process checkpoint as formats 1 and 2 kept the optimizer state: optimizer.safetensors with
// each state tensor's part by parameter name, shaped like the parameter. Returns the manifest.
json with_optimizer_by_name(const fs::path& checkpoint, const nn::ParameterStore& params) {
  const fs::path shard = checkpoint / "optimizer.rank00000.safetensors";
  {
    io::SafeTensorsFile file = io::SafeTensorsFile::open(shard.string());
    io::SafeTensorsWriter by_name;
    std::deque<std::vector<float>> keep;
    for (const std::string& name : file.names()) {
      if (name.starts_with("runs.")) continue;
      const nn::Parameter& p = params.get(name.substr(name.find('.') + 1));
      keep.emplace_back(static_cast<size_t>(p.numel()));
      Tensor flat = Tensor::from_external(keep.back().data(), {p.numel()}, DType::F32);
      file.copy_to(name, flat);
      by_name.add(name, Tensor::from_external(keep.back().data(), p.shape, DType::F32));
    }
    by_name.write((checkpoint / "optimizer.safetensors").string());
  }
  fs::remove(shard);
  json j = unsigned_manifest(checkpoint);
  j["files"].erase("optimizer.rank00000.safetensors");
  j["files"]["optimizer.safetensors"] = {
      {"bytes", fs::file_size(checkpoint / "optimizer.safetensors")},
      {"xxh3", fmt::format("{:016x}", file_checksum((checkpoint / "optimizer.safetensors").string()))}};
  return j;
}

TEST_F(Checkpoint, Version2ManifestsStillLoadOnTheirLayout) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  Tensor first_moment = optimizer_->state_dict().tensors[0].values;
  for (int64_t i = 0; i < first_moment.numel(); ++i) first_moment.data<float>()[i] = 0.25f * static_cast<float>(i % 7);
  const std::vector<float> m(first_moment.data<float>(), first_moment.data<float>() + first_moment.numel());
  const fs::path path = save(store, 2, 50.0);
  json v2 = with_optimizer_by_name(path, model_->parameters());
  v2["version"] = 2;
  write_text(path / "manifest.json", checkpoint_manifest_text(v2));
  first_moment.fill_zero();
  const LoadedCheckpoint loaded = load_checkpoint(path.string(), config_, state());
  EXPECT_EQ(loaded.state.step, 2);
  EXPECT_EQ(std::vector<float>(first_moment.data<float>(), first_moment.data<float>() + first_moment.numel()), m);
  // Another layout is refused: that format kept the state in files per layout.
  RunConfig two = config_;
  two.parallel.dp = 2;
  expect_error([&] { load_checkpoint(path.string(), two, state()); },
               {"(format 2) was saved with parallel.dp = 1", "resume with parallel.dp = 1"}, "v2 on dp 2");
}

TEST_F(Checkpoint, Version1ManifestsStillLoadWithTheirOtherChecks) {
  CheckpointStore store((dir_ / "checkpoints").string(), 3);
  const fs::path path = save(store, 2, 50.0);
  // What tessera wrote before the manifest protected itself: no checksum, no elapsed time.
  json v1 = with_optimizer_by_name(path, model_->parameters());
  v1["version"] = 1;
  v1.erase("elapsed_seconds");
  write_text(path / "manifest.json", v1.dump(2));
  const LoadedCheckpoint loaded = load_checkpoint(path.string(), config_, state());
  EXPECT_EQ(loaded.state.step, 2);
  EXPECT_EQ(loaded.state.elapsed_seconds, 0.0);
  // Without a checksum to catch an edit, the field checks still do.
  v1["step"] = -3;
  write_text(path / "manifest.json", v1.dump(2));
  expect_error([&] { read_checkpoint_manifest(path.string()); }, {"field 'step'", "non-negative integer"}, "v1 step");
  v1["step"] = 2;
  v1["files"] = json::object();
  write_text(path / "manifest.json", v1.dump(2));
  expect_error([&] { read_checkpoint_manifest(path.string()); }, {"field 'files'", "is empty"}, "v1 files");
}

TEST_F(Checkpoint, ResumeResolvesRunCheckpointsAndStepFolders) {
  const fs::path run = dir_ / "run", checkpoints = run / "checkpoints";
  CheckpointStore store(checkpoints.string(), 5);
  save(store, 1);
  save(store, 2);
  const std::string newest = save(store, 3);
  std::string note;
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string(), &note), newest);
  EXPECT_EQ(note, "");
  EXPECT_EQ(resolve_checkpoint(run.string(), "", &note), newest);
  EXPECT_EQ(resolve_checkpoint(checkpoints.string(), "", &note), newest);
  EXPECT_EQ(resolve_checkpoint(checkpoints.string() + "/", "", &note), newest);
  const std::string step1 = (checkpoints / "step_00000001").string();
  EXPECT_EQ(resolve_checkpoint(step1, "", &note), step1);
  EXPECT_EQ(note, "");

  // `latest` missing while complete checkpoints exist: the newest complete one, said so.
  fs::remove(checkpoints / "latest");
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string(), &note), newest);
  EXPECT_NE(note.find("no 'latest' pointer"), std::string::npos) << note;
  EXPECT_NE(note.find("using the newest complete checkpoint"), std::string::npos) << note;
  EXPECT_EQ(resolve_checkpoint(run.string(), "", &note), newest);
  EXPECT_FALSE(note.empty());
  // Pointing at a folder that is gone, or incomplete (a newer save that never finished).
  write_text(checkpoints / "latest", "step_00000009\n");
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string(), &note), newest);
  EXPECT_NE(note.find("which is gone"), std::string::npos) << note;
  fs::create_directories(checkpoints / "step_00000004");
  write_text(checkpoints / "latest", "step_00000004\n");
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string(), &note), newest);
  EXPECT_NE(note.find("incomplete"), std::string::npos) << note;
  // A pointer that is not a name inside the folder is not followed.
  write_text(checkpoints / "latest", "../elsewhere\n");
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string(), &note), newest);
  EXPECT_NE(note.find("corrupt"), std::string::npos) << note;

  // Nothing to resume: clear errors.
  expect_error([&] { resolve_checkpoint("latest", (dir_ / "empty").string(), &note); },
               {"holds no complete checkpoint", "start without it"}, "latest of nothing");
  expect_error([&] { resolve_checkpoint((dir_ / "absent").string(), "", &note); }, {"does not exist"}, "absent");
  write_text(dir_ / "file", "x");
  expect_error([&] { resolve_checkpoint((dir_ / "file").string(), "", &note); }, {"is not a folder"}, "file");
  fs::create_directories(dir_ / "unrelated");
  expect_error([&] { resolve_checkpoint((dir_ / "unrelated").string(), "", &note); }, {"is not a checkpoint"},
               "unrelated");
  expect_error([&] { resolve_checkpoint("latest", "", &note); }, {"\"latest\""}, "latest without a run");
  fs::remove_all(checkpoints);
  fs::create_directories(checkpoints / "step_00000001");
  expect_error([&] { resolve_checkpoint(run.string(), "", &note); }, {"holds no complete checkpoint"}, "incomplete only");
}

TEST_F(Checkpoint, AFailedSaveIsAClearErrorAndLeavesCompleteCheckpointsIntact) {
  const fs::path checkpoints = dir_ / "checkpoints";
  CheckpointStore store(checkpoints.string(), 5);
  const std::string first = save(store, 1);
  const std::string model_bytes = read_text(fs::path(first) / "model.safetensors");

  // A run folder that is a file.
  write_text(dir_ / "not_a_folder", "x");
  CheckpointStore into_file((dir_ / "not_a_folder" / "checkpoints").string(), 2);
  expect_error([&] { save(into_file, 2); }, {"cannot save checkpoint", "not_a_folder", "train.out_dir"}, "file");

  // A tokenizer that cannot be copied fails the save after the tensors were written.
  expect_error([&] { store.save(config_, at_step(2), state(), (dir_ / "no_such.model").string()); },
               {"cannot save checkpoint", "step_00000002", "intact"}, "missing tokenizer");

  // A folder that cannot be written (not as root, who may write anywhere).
  if (::geteuid() != 0) {
    fs::permissions(checkpoints, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
    expect_error([&] { save(store, 3); }, {"cannot save checkpoint", "writable"}, "read-only");
    fs::permissions(checkpoints, fs::perms::owner_write, fs::perm_options::add);
  }
  // A disk that fills up while the tensors are written: a file-size limit makes the write fail
  // with EFBIG the way a full disk fails it with ENOSPC, for root too.
  {
    struct rlimit saved {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto previous = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit small = saved;
    small.rlim_cur = 4096;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    expect_error([&] { save(store, 4); }, {"cannot save checkpoint", "step_00000004", "Free disk space"}, "disk full");
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
  }
  // No temporary folder is left, no new checkpoint appears, and the first one still loads.
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    EXPECT_FALSE(entry.path().filename().string().starts_with(".tmp.")) << entry.path();
    EXPECT_NE(entry.path().filename(), "step_00000002");
    EXPECT_NE(entry.path().filename(), "step_00000004");
  }
  EXPECT_EQ(read_text(fs::path(first) / "model.safetensors"), model_bytes);
  EXPECT_EQ(resolve_checkpoint("latest", checkpoints.string()), first);
  EXPECT_NO_THROW(load_checkpoint(first, config_, state()));
}

TEST(CheckpointManifest, StepOfFolderName) {
  EXPECT_EQ(step_of_folder_name("step_00000003"), 3);
  EXPECT_EQ(step_of_folder_name("step_0"), 0);
  EXPECT_EQ(step_of_folder_name("step_"), std::nullopt);
  EXPECT_EQ(step_of_folder_name("step_3a"), std::nullopt);
  EXPECT_EQ(step_of_folder_name("step_-3"), std::nullopt);
  EXPECT_EQ(step_of_folder_name("best"), std::nullopt);
  EXPECT_EQ(step_of_folder_name("step_00000003.old.12"), std::nullopt);
  EXPECT_EQ(step_of_folder_name("step_1234567890123456789012"), std::nullopt);
}

}  // namespace
}  // namespace tessera::train
