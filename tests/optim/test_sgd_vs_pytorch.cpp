// optim.name = "sgd" against torch.optim.SGD (PyTorch, run by /usr/bin/python3) on the same
// weights and gradients, step by step: plain, heavy-ball and Nesterov momentum, with L2 weight
// decay (PyTorch's own) and decoupled weight decay, matrices decayed and vectors not.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "io/safetensors.h"
#include "optim/make_optimizer.h"

namespace tessera {
namespace {

struct SgdCase {
  std::string label;
  float momentum = 0;
  bool nesterov = false;
  float weight_decay = 0;
  bool decoupled = false;
};

void check(const SgdCase& c) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("tessera_sgd_{}_{}", c.label, ::getpid());
  std::filesystem::create_directories(dir);
  const std::string in_path = (dir / "in.safetensors").string(), out_path = (dir / "out.safetensors").string();

  MemoryAccountant memory;
  nn::ParameterStore store;
  store.declare("embed.tokens.weight", {16, 8}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("fc.weight", {24, 16}, nn::ParameterRole::Weight, nn::Init::Normal, 0.5f);
  store.declare("fc.bias", {24}, nn::ParameterRole::Bias, nn::Init::Normal, 0.5f);
  store.declare("ln.weight", {16}, nn::ParameterRole::NormGain, nn::Init::Ones);
  store.allocate(memory);
  store.initialize(3);

  constexpr int kSteps = 5;
  constexpr float kLr = 0.05f;
  io::SafeTensorsWriter writer;
  std::vector<std::vector<float>> initial, grads;  // kept alive until write()
  std::string decayed;
  for (const nn::Parameter& p : store.all()) {
    const float* w = store.value(p).data<float>();
    initial.emplace_back(w, w + p.numel());
    writer.add("param." + p.name, DType::F32, p.shape, initial.back().data(), size_t(p.numel()) * 4);
    if (p.shape.size() >= 2) decayed += (decayed.empty() ? "" : ",") + p.name;
  }
  std::mt19937_64 rng(17);
  for (int s = 1; s <= kSteps; ++s) {
    for (const nn::Parameter& p : store.all()) {
      std::normal_distribution<float> normal(0.0f, 0.1f);
      std::vector<float> g(size_t(p.numel()));
      for (float& x : g) x = normal(rng);
      grads.push_back(std::move(g));
      writer.add(fmt::format("grad.{}.{}", s, p.name), DType::F32, p.shape, grads.back().data(), size_t(p.numel()) * 4);
    }
  }
  // Each add() stores a pointer: the vectors above must not move.
  grads.shrink_to_fit();
  writer.set_metadata("lr", fmt::format("{}", kLr));
  writer.set_metadata("momentum", fmt::format("{}", c.momentum));
  writer.set_metadata("nesterov", c.nesterov ? "true" : "false");
  writer.set_metadata("weight_decay", fmt::format("{}", c.weight_decay));
  writer.set_metadata("decoupled", c.decoupled ? "true" : "false");
  writer.set_metadata("steps", std::to_string(kSteps));
  writer.set_metadata("decayed", decayed);
  writer.write(in_path);

  const std::string command =
      fmt::format("OMP_NUM_THREADS=1 /usr/bin/python3 {}/tests/optim/torch_sgd.py {} {}", source, in_path, out_path);
  ASSERT_EQ(std::system(command.c_str()), 0) << "PyTorch's SGD failed: " << command;
  io::SafeTensorsFile torch_out = io::SafeTensorsFile::open(out_path);

  optim::OptimizerConfig config;
  config.kind = optim::OptimizerKind::Sgd;
  config.momentum = c.momentum;
  config.nesterov = c.nesterov;
  config.weight_decay = c.weight_decay;
  config.decoupled_weight_decay = c.decoupled;
  const std::vector<optim::Segment> segments = optim::whole_parameters(store);
  auto opt = optim::make_optimizer(memory, config, store, segments, nullptr);
  size_t g = 0;
  double worst_of_run = 0;
  for (int s = 1; s <= kSteps; ++s) {
    for (const nn::Parameter& p : store.all()) {
      std::copy(grads[g].begin(), grads[g].end(), store.grad_of(p).data<float>());
      ++g;
    }
    opt->step(kLr, segments);
    for (const nn::Parameter& p : store.all()) {
      Tensor want = Tensor::empty(p.shape, DType::F32, MemoryTag::Workspace, memory);
      torch_out.copy_to(fmt::format("step{}.{}", s, p.name), want);
      const float* w = store.value(p).data<float>();
      double worst = 0;
      for (int64_t i = 0; i < p.numel(); ++i) {
        worst = std::max(worst, std::abs(double(w[i]) - want.data<float>()[i]) / std::max(1.0, std::abs(double(w[i]))));
      }
      EXPECT_LE(worst, 1e-6) << c.label << " step " << s << " " << p.name;
      worst_of_run = std::max(worst_of_run, worst);
    }
  }
  std::printf("%s: largest relative difference from torch.optim.SGD over %d steps: %.3g\n", c.label.c_str(), kSteps,
              worst_of_run);
  std::filesystem::remove_all(dir);
}

TEST(SgdVsPyTorch, Plain) { check({"plain", 0.0f, false, 0.0f, false}); }
TEST(SgdVsPyTorch, MomentumWithL2Decay) { check({"momentum_l2", 0.9f, false, 0.1f, false}); }
TEST(SgdVsPyTorch, NesterovWithL2Decay) { check({"nesterov_l2", 0.9f, true, 0.05f, false}); }
TEST(SgdVsPyTorch, NesterovWithDecoupledDecay) { check({"nesterov_decoupled", 0.8f, true, 0.2f, true}); }

}  // namespace
}  // namespace tessera
