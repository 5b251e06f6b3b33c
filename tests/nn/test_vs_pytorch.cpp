// The GPT model equals an independent PyTorch implementation (tests/nn/torch_reference.py) on the
// same weights and batch: the loss, every parameter gradient, and the losses of five AdamW steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/safetensors.h"
#include "reference_metadata.h"
#include "nn/gpt.h"
#include "optim/adamw.h"

using namespace tessera;
using config::Architecture;
using config::ModelConfig;

namespace {

struct Case {
  const char* name;
  ModelConfig model;
  int B, T;
};

ModelConfig make(Architecture arch, int L, int H, int C, int V, int Tmax, bool bias, bool tied) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = L;
  c.n_head = H;
  c.n_embd = C;
  c.vocab_size = V;
  c.seq_len = Tmax;
  c.bias = bias;
  c.tied_embeddings = tied;
  return c;
}

// Norm-wise relative difference ||a - b|| / ||b||.
double relative_difference(const float* a, const float* b, size_t n) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

constexpr int kSteps = 5;
constexpr float kLr = 3e-3f;

void run_case(const Case& tc) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  ASSERT_NE(source, nullptr) << "TESSERA_SOURCE_DIR must point at the source tree (ctest sets it)";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("tessera_vs_pytorch_" + std::string(tc.name) + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string in_path = (dir / "in.safetensors").string(), out_path = (dir / "out.safetensors").string();

  const ModelConfig& c = tc.model;
  const int B = tc.B, T = tc.T, N = B * T;
  MemoryAccountant mem;
  nn::GPT model(c, mem, 42);
  optim::AdamWConfig adam{0.9f, 0.95f, 1e-8f, 0.1f};
  optim::AdamW opt(mem, adam, model.parameters().numel());
  nn::ParameterStore& store = model.parameters();

  std::vector<int32_t> tokens(static_cast<size_t>(N)), targets(static_cast<size_t>(N));
  int counted = 0;
  for (int i = 0; i < N; ++i) {
    tokens[static_cast<size_t>(i)] = static_cast<int32_t>(uniform(9, 1, static_cast<uint64_t>(i)) * static_cast<float>(c.vocab_size));
    // Every seventh target is ignored, as padding would be.
    targets[static_cast<size_t>(i)] = i % 7 == 3 ? -1 : static_cast<int32_t>(uniform(9, 2, static_cast<uint64_t>(i)) * static_cast<float>(c.vocab_size));
    counted += targets[static_cast<size_t>(i)] >= 0;
  }

  io::SafeTensorsWriter writer;
  for (const auto& p : store.all()) writer.add(p.name, store.value(p));
  writer.add("batch.tokens", DType::I32, {B, T}, tokens.data(), tokens.size() * 4);
  writer.add("batch.targets", DType::I32, {B, T}, targets.data(), targets.size() * 4);
  auto meta = [&](const char* k, const std::string& v) { writer.set_metadata(k, v); };
  tessera::testing::write_model_metadata(writer, c);
  meta("lr", fmt::format("{:.9g}", kLr));
  meta("beta1", fmt::format("{:.9g}", adam.beta1));
  meta("beta2", fmt::format("{:.9g}", adam.beta2));
  meta("eps", fmt::format("{:.9g}", adam.eps));
  meta("weight_decay", fmt::format("{:.9g}", adam.weight_decay));
  meta("steps", std::to_string(kSteps));
  writer.write(in_path);

  const std::string command = fmt::format("OMP_NUM_THREADS=2 /usr/bin/python3 {}/tests/nn/torch_reference.py {} {}",
                                          source, in_path, out_path);
  ASSERT_EQ(std::system(command.c_str()), 0) << "the PyTorch reference failed: " << command;
  io::SafeTensorsFile ref = io::SafeTensorsFile::open(out_path);
  auto ref_floats = [&](const std::string& name, int64_t n) {
    Tensor t = Tensor::empty({n}, DType::F32, MemoryTag::Workspace, mem);
    Tensor view = t.reshape(ref.entry(name).shape);
    ref.copy_to(name, view);
    return t;
  };

  // Steps: loss and gradients at the current weights, then one AdamW update.
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    model.parameters().zero_grads();
    nn::StepContext step{mem, store};
    nn::GPT::Ctx ctx;
    losses.push_back(model.forward(step, ctx, tokens.data(), targets.data(), B, T, 1.0f / static_cast<float>(counted)) / counted);
    model.backward(step, ctx);
    if (s == 0) {
      const float ref_loss = ref_floats("loss", 1).data<float>()[0];
      EXPECT_NEAR(losses[0], ref_loss, 1e-5 * std::fabs(ref_loss)) << tc.name;
      for (const auto& p : model.parameters().all()) {
        Tensor g = ref_floats("grad." + p.name, p.numel());
        double rel = relative_difference(store.grad_of(p).data<float>(), g.data<float>(), static_cast<size_t>(p.numel()));
        EXPECT_LT(rel, 1e-4) << tc.name << ": gradient of " << p.name;
      }
    }
    opt.step(kLr, optim::whole_parameters(store));
  }
  Tensor ref_losses = ref_floats("step_losses", kSteps);
  for (int s = 0; s < kSteps; ++s) {
    const double r = ref_losses.data<float>()[s];
    EXPECT_NEAR(losses[static_cast<size_t>(s)], r, 1e-4 * std::fabs(r)) << tc.name << ": loss at step " << s;
  }
  EXPECT_LT(losses.back(), losses.front()) << tc.name << ": AdamW must lower the loss on a fixed batch";
  for (const auto& p : model.parameters().all()) {
    Tensor f = ref_floats("final." + p.name, p.numel());
    const float* mine = store.value(p).data<float>();
    const float* theirs = f.data<float>();
    if (p.name.ends_with("attn.qkv.bias")) {
      // The key bias has an exactly zero gradient (adding a constant to every key shifts each
      // query's scores uniformly, which softmax ignores), so both implementations see only
      // round-off there, which Adam normalizes into full-size steps of random sign. Compare the
      // query and value parts, whose gradients are real.
      const auto C = static_cast<size_t>(c.n_embd), Ckv = static_cast<size_t>(c.kv_dim());
      EXPECT_LT(relative_difference(mine, theirs, C), 1e-4) << tc.name << ": " << p.name << " (query part)";
      EXPECT_LT(relative_difference(mine + C + Ckv, theirs + C + Ckv, Ckv), 1e-4)
          << tc.name << ": " << p.name << " (value part)";
      continue;
    }
    EXPECT_LT(relative_difference(mine, theirs, static_cast<size_t>(p.numel())), 1e-4)
        << tc.name << ": parameter " << p.name << " after " << kSteps << " steps";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace

// Powers of two everywhere: the common case.
TEST(VsPyTorch, Gpt2TiedWithBias) {
  run_case({"gpt2_tied", make(Architecture::Gpt2, 2, 4, 64, 128, 32, true, true), 2, 32});
}
// Vocabulary, heads and sequence length that are not powers of two, untied head, no biases, and
// rows shorter than the model's context.
TEST(VsPyTorch, Gpt2OddShapesUntiedNoBias) {
  run_case({"gpt2_odd", make(Architecture::Gpt2, 3, 3, 48, 97, 40, false, false), 3, 37});
}
TEST(VsPyTorch, LlamaStyle) {
  run_case({"llama", make(Architecture::Llama, 2, 4, 64, 101, 32, false, false), 2, 29});
}
// Grouped-query attention (8 heads on 2 key/value heads, PyTorch repeating each key/value head
// over its group), for Llama and for GPT-2 with biases.
TEST(VsPyTorch, LlamaGroupedQueryAttention) {
  ModelConfig c = make(Architecture::Llama, 2, 8, 64, 101, 32, false, false);
  c.n_kv_head = 2;
  run_case({"llama_gqa", c, 2, 29});
}
// model.activation against PyTorch's own functions: squared ReLU and ReLU on GPT-2, SwiGLU on GPT-2
// (with biases, which Llama lacks) and squared ReLU on Llama.
TEST(VsPyTorch, ActivationsOnEitherArchitecture) {
  ModelConfig relu2 = make(Architecture::Gpt2, 2, 4, 64, 128, 32, true, true);
  relu2.activation = config::Activation::Relu2;
  run_case({"gpt2_relu2", relu2, 2, 32});
  ModelConfig relu = relu2;
  relu.activation = config::Activation::Relu;
  run_case({"gpt2_relu", relu, 2, 32});
  ModelConfig swiglu = relu2;
  swiglu.activation = config::Activation::Swiglu;
  run_case({"gpt2_swiglu", swiglu, 2, 32});
  ModelConfig llama_relu2 = make(Architecture::Llama, 2, 4, 64, 101, 32, false, false);
  llama_relu2.activation = config::Activation::Relu2;
  run_case({"llama_relu2", llama_relu2, 2, 29});
}
TEST(VsPyTorch, Gpt2GroupedQueryAttentionWithBias) {
  ModelConfig c = make(Architecture::Gpt2, 2, 4, 64, 128, 32, true, true);
  c.n_kv_head = 1;
  run_case({"gpt2_gqa", c, 2, 32});
}
