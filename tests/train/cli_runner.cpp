#include "cli_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/rng.h"

namespace tessera::testing {

std::string tessera_exe() { return TESSERA_EXE; }

CliResult run_tessera(const std::string& args) {
  CliResult r;
  const std::string command = "OMP_NUM_THREADS=1 " + tessera_exe() + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

pid_t spawn_tessera(const std::string& args, const std::string& log_path) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // a group of its own, as a terminal's job: signals can go to the whole group
    const std::string command = "exec env OMP_NUM_THREADS=1 " + tessera_exe() + " " + args + " > " + log_path + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

std::string make_test_corpus(size_t bytes) {
  const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "land", "water", "light", "darkness",
                         "were", "upon", "face", "of", "deep", "spirit", "god", "moved", "day", "night"};
  std::string text;
  for (uint64_t i = 0; text.size() < bytes; ++i) {
    const int n = 5 + static_cast<int>(tessera::uniform(3, 1, i) * 10);
    for (int w = 0; w < n; ++w) {
      text += words[static_cast<int>(tessera::uniform(3, 2, i * 31 + static_cast<uint64_t>(w)) * 20)];
      text += w + 1 < n ? " " : ".\n";
    }
  }
  return text;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CliResult prepare_test_dataset(const std::string& root, size_t corpus_bytes, int vocab_size) {
  const std::filesystem::path dir(root);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << make_test_corpus(corpus_bytes);
  return run_tessera("data prepare --input " + (dir / "corpus.txt").string() + " --out " + (dir / "data").string() +
                     " --vocab-size " + std::to_string(vocab_size) + " --val-fraction 0.1");
}

std::vector<double> train_losses_of(const std::string& metrics_path) {
  std::vector<double> out;
  std::ifstream in(metrics_path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["loss"].get<double>());
  }
  return out;
}

nlohmann::json last_train_line(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line;
  nlohmann::json last;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train") last = std::move(j);
  }
  return last;
}

double predicted_activation_peak(const std::string& output) {
  const std::string key = "predicted activation peak ";
  const size_t at = output.find(key);
  if (at == std::string::npos) return -1;
  return std::stod(output.substr(at + key.size()));
}

}  // namespace tessera::testing
