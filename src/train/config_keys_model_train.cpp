// The keys of what is trained and how: model (declared with the model, config/model_keys.h), data,
// train and optim (config_keys.h).
#include "train/config_keys.h"

#include <fmt/format.h>

#include <iterator>

#include "optim/optimizer_config.h"

namespace tessera::train {

namespace {
std::string_view optimizer_of(const RunConfig& c) { return optim::optimizer_name(c.optim.kind); }
void set_optimizer(RunConfig& c, std::string_view name) {
  const std::optional<optim::OptimizerKind> kind = config::find_optimizer_kind(name);
  const std::span<const std::string_view> names = optim::optimizer_names();
  std::string known;
  for (size_t i = 0; i < names.size(); ++i) {
    known += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == names.size() ? " or " : ", ", names[i]);
  }
  TS_CHECK(kind.has_value(), "config: optim.name = '{}' is not known; use {}", name, known);
  c.optim.kind = *kind;
}

// data, train and optim.
std::vector<ConfigKey> training_keys() {
  using K = optim::OptimizerKind;
  return {
    {.key = "data.dir",
     .field = in_data<&DataSection::dir>,
     .doc = "a folder made by `tessera data prepare` (tokenizer.model, train.bin, val.bin, data.json)"},
    {.key = "train.steps",
     .field = in_train<&TrainSection::steps>,
     .range = Range{1, kSteps},
     .doc = "optimizer steps of the run"},
    {.key = "train.allow_changes",
     .field = in_train<&TrainSection::allow_changes>,
     .doc = "resume with settings that change the optimization (`optim.*`, `train.steps`, `train.batch_size`, "
            "compression); false refuses them, naming each (see \"Resume\")"},
    {.key = "train.exit_after",
     .field = in_train<&TrainSection::exit_after>,
     .range = Range{0, kSteps},
     .doc = "stop after this many steps in this process (with a checkpoint); 0 runs to `train.steps`"},
    {.key = "train.max_minutes",
     .field = in_train<&TrainSection::max_minutes>,
     .range = Range{.low = 0, .high = kFinite,
                    .message = "{key} = {value} must be 0 (no limit) or a number of minutes"},
     .doc = "stop after this many minutes in this process (with a checkpoint); 0: no limit"},
    {.key = "train.overwrite",
     .field = in_train<&TrainSection::overwrite>,
     .doc = "start over in a run folder that holds an earlier run, deleting its checkpoints and metrics "
            "(without it such a folder is refused unless resuming)"},
    {.key = "train.batch_size",
     .field = in_train<&TrainSection::batch_size>,
     .range = Range{1, 1 << 24},
     .doc = "sequences per optimizer step, over all data-parallel ranks"},
    {.key = "train.micro_batch_size",
     .field = in_train<&TrainSection::micro_batch_size>,
     .range = Range{1, 1 << 24},
     .doc = "sequences per forward/backward on one rank; `batch_size / (micro_batch_size × parallel.dp)` "
            "microbatches are accumulated"},
    {.key = "train.seed",
     .field = in_train<&TrainSection::seed>,
     .doc = "initialization, data order and dropout"},
    {.key = "train.out_dir",
     .field = in_train<&TrainSection::out_dir>,
     .doc = "the run folder"},
    {.key = "train.eval_every",
     .field = in_train<&TrainSection::eval_every>,
     .range = Range{0, 1 << 30},
     .doc = "steps between validation evaluations (0: only at the end)"},
    {.key = "train.eval_batches",
     .field = in_train<&TrainSection::eval_batches>,
     .range = Range{1, 1 << 20},
     .doc = "global batches of the validation split per evaluation: `eval_batches × train.batch_size` "
            "sequences (all of the split's windows when it has fewer), always the same ones, read in "
            "microbatches of `train.micro_batch_size`, so the value does not depend on the microbatch size"},
    {.key = "train.sample_every",
     .field = in_train<&TrainSection::sample_every>,
     .range = Range{0, 1 << 30},
     .doc = "steps between text samples (0: only at the end)"},
    {.key = "train.sample_tokens",
     .field = in_train<&TrainSection::sample_tokens>,
     .range = Range{0, 1 << 20},
     .doc = "tokens per sample (0: no sample)"},
    {.key = "train.sample_temperature",
     .field = in_train<&TrainSection::sample_temperature>,
     .range = Range{.low = 0, .high = kFinite,
                    .message = "{key} = {value} must be a finite number >= 0 (0: the likeliest token every time)"},
     .doc = "sampling temperature (0: the likeliest token every time)"},
    {.key = "train.sample_top_k",
     .field = in_train<&TrainSection::sample_top_k>,
     .range = Range{0, 1 << 24},
     .doc = "sample among the k likeliest tokens (0: all)"},
    {.key = "train.sample_prompt",
     .field = in_train<&TrainSection::sample_prompt>,
     .doc = "text the samples continue (empty: the first validation token)"},
    {.key = "train.init_from",
     .field = in_train<&TrainSection::init_from>,
     .doc = "a checkpoint (step folder, `checkpoints/` folder or run folder), or a folder in the Hugging Face "
            "layout (`config.json` with `model.safetensors` or its shards), whose weights start this run: "
            "fine-tuning, or training on other data. Only the weights: the run starts at step 0 with a fresh "
            "optimizer state, its own data order and seed. The model keys must match the checkpoint's. With "
            "`checkpoint.resume = \"auto\"` it applies to the first start only (later starts resume the run's "
            "own checkpoints); not with any other `checkpoint.resume`"},
    {.key = "optim.name",
     .field = KindName{optimizer_of, set_optimizer},
     .doc = "the optimizer: `\"adamw\"` (Adam with decoupled weight decay); `\"sgd\"` (PyTorch's SGD: "
            "momentum, Nesterov); `\"adafactor\"` (factored second moment: O(n + m) state per matrix, update "
            "clipping, Shazeer & Stern 2018; each expert of an MoE layer factored as a matrix of its own; "
            "under tensor parallelism each block's terms go to the matrix's global rows and columns); "
            "`\"adam8bit\"` (AdamW with blockwise 8-bit moments, Dettmers et al. 2022); `\"lamb\"` (Adam with "
            "a per-tensor trust ratio, You et al. 2020); `\"lars\"` (momentum SGD with a per-tensor trust "
            "ratio, You et al. 2017); `\"onebit_adam\"` (1-bit Adam, Tang et al. 2021: exact Adam for "
            "`optim.freeze_step` steps, then the variance frozen and each rank's momentum averaged in one bit "
            "per element with error feedback instead of reducing gradients, ~1/20 of the bytes; under "
            "`parallel.ep` > 1 the experts' momentum is averaged over their own group; with "
            "`parallel.zero_stage = 0`, no `parallel.compression`, not with 2bw; under fp16 each rank's local "
            "gradient is checked for overflow before the exchange, and all skip together). Keys an optimizer "
            "does not read are refused when set. Per-tensor statistics are exact under ZeRO (equal to one "
            "process)"},
    {.key = "optim.lr",
     .field = in_optim<&OptimSection::lr>,
     .range = Range{.low = 0, .high = 10, .low_open = true, .high_open = true,
                    .message = "{key} = {value} must be in (0, 10)"},
     .doc = "peak learning rate"},
    {.key = "optim.min_lr",
     .field = in_optim<&OptimSection::min_lr>,
     .doc = "learning rate at the end of the cosine decay"},
    {.key = "optim.warmup_steps",
     .field = in_optim<&OptimSection::warmup_steps>,
     .range = Range{0, kSteps},
     .doc = "linear warmup steps"},
    {.key = "optim.weight_decay",
     .field = in_optim<&OptimSection::weight_decay>,
     .range = Range{.low = 0, .high = kUnbounded, .message = "{key} must be >= 0, got {value}"},
     .doc = "weight decay of matrices and embeddings (not of biases and norm gains), every optimizer: "
            "decoupled (`w -= lr·wd·w`) for adamw, adam8bit, adafactor (with its step size); added to the "
            "update before the trust ratio for lamb, to the gradient for lars and sgd (PyTorch's L2; see "
            "`optim.decoupled_weight_decay`)"},
    {.key = "optim.beta1",
     .field = in_optim<&OptimSection::beta1>,
     .range = Range{.low = 0, .high = 1, .high_open = true, .message = "{key} = {value} must be in [0, 1)"},
     .optimizers = {K::AdamW, K::Adam8bit, K::Lamb, K::OneBitAdam, K::Adafactor},
     .doc = "β1 of adamw, adam8bit, lamb and onebit_adam; of adafactor with `optim.first_moment = true`"},
    {.key = "optim.beta2",
     .field = in_optim<&OptimSection::beta2>,
     .range = Range{.low = 0, .high = 1, .high_open = true, .message = "{key} = {value} must be in [0, 1)"},
     .optimizers = {K::AdamW, K::Adam8bit, K::Lamb, K::OneBitAdam},
     .doc = "β2 of adamw, adam8bit, lamb and onebit_adam (adafactor's follows `optim.decay_rate`)"},
    {.key = "optim.eps",
     .field = in_optim<&OptimSection::eps>,
     .range = Range{.low = 0, .high = kUnbounded, .low_open = true, .message = "{key} must be positive, got {value}"},
     .optimizers = {K::AdamW, K::Adam8bit, K::Lamb, K::Lars, K::OneBitAdam},
     .doc = "ε of adamw, adam8bit, lamb and onebit_adam (added to √v̂), and of lars (added to the local "
            "rate's denominator); adafactor uses the paper's ε1 = 1e-30, ε2 = 1e-3"},
    {.key = "optim.momentum",
     .field = in_optim<&OptimSection::momentum>,
     .range = Range{.low = 0, .high = 1, .high_open = true, .message = "{key} = {value} must be in [0, 1)"},
     .optimizers = {K::Sgd, K::Lars},
     .doc = "sgd and lars: momentum μ of the buffer `b ← μ b + d` (PyTorch's SGD, dampening 0; LARS usually "
            "0.9)"},
    {.key = "optim.nesterov",
     .field = in_optim<&OptimSection::nesterov>,
     .optimizers = {K::Sgd},
     .doc = "sgd: Nesterov momentum (needs `optim.momentum` > 0)"},
    {.key = "optim.decoupled_weight_decay",
     .field = in_optim<&OptimSection::decoupled_weight_decay>,
     .optimizers = {K::Sgd},
     .doc = "sgd: decay the weights by `1 − lr·wd` before the step (SGDW) instead of adding `wd·w` to the "
            "gradient"},
    {.key = "optim.trust_coefficient",
     .field = in_optim<&OptimSection::trust_coefficient>,
     .range = Range{.low = 0, .high = 1, .low_open = true,
                    .message = "{key} = {value} must be in (0, 1] (LARS uses 0.001)"},
     .optimizers = {K::Lars},
     .doc = "lars: η of the local rate `η‖w‖ / (‖g‖ + wd‖w‖ + ε)`, which multiplies `optim.lr` per tensor"},
    {.key = "optim.unadapted_lr_scale",
     .field = in_optim<&OptimSection::unadapted_lr_scale>,
     .range = Range{.low = 0, .high = 1000,
                    .message = "{key} = {value} must be in [0, 1000] (0 freezes the norm gains and biases; 1 gives "
                               "them optim.lr)"},
     .optimizers = {K::Lamb, K::Lars},
     .doc = "lamb, lars: the norm gains and biases, which the trust ratio leaves out, step at `optim.lr` × "
            "this (the matrices' rate is a relative step, often ten times what these tensors take under "
            "AdamW); 0 freezes them"},
    {.key = "optim.first_moment",
     .field = in_optim<&OptimSection::first_moment>,
     .optimizers = {K::Adafactor},
     .doc = "adafactor: keep a momentum (β1 = `optim.beta1`) of the clipped update (the paper keeps none)"},
    {.key = "optim.relative_step",
     .field = in_optim<&OptimSection::relative_step>,
     .optimizers = {K::Adafactor},
     .doc = "adafactor: the step of each tensor is `lr × max(1e-3, RMS(w))` (the paper's relative step size; "
            "the schedule plays ρ)"},
    {.key = "optim.decay_rate",
     .field = in_optim<&OptimSection::decay_rate>,
     .range = Range{.low = 0, .high = 1, .low_open = true,
                    .message = "{key} = {value} must be in (0, 1] (Adafactor's beta2 at step t is 1 - "
                               "t^-decay_rate; the paper uses 0.8)"},
     .optimizers = {K::Adafactor},
     .doc = "adafactor: β2 at step t is `1 − t^−decay_rate`"},
    {.key = "optim.clip_threshold",
     .field = in_optim<&OptimSection::clip_threshold>,
     .range = Range{.low = 0, .high = kUnbounded, .low_open = true,
                    .message = "{key} must be positive (the paper uses 1), got {value}"},
     .optimizers = {K::Adafactor},
     .doc = "adafactor: the update is scaled down to an RMS of at most this (d)"},
    {.key = "optim.block_size",
     .field = in_optim<&OptimSection::block_size>,
     .range = Range{16, 1 << 24},
     .optimizers = {K::Adam8bit},
     .doc = "adam8bit: elements per quantization block (blocks follow each parameter's element index; under "
            "ZeRO a block cut by a shard boundary takes the maximum of its parts' absmax, so the sharded run "
            "equals one process bit for bit)"},
    {.key = "optim.freeze_step",
     .field = in_optim<&OptimSection::freeze_step>,
     .range = Range{0, kSteps},
     .optimizers = {K::OneBitAdam},
     .doc = "onebit_adam: steps of exact Adam, the gradients reduced densely, before the second moment "
            "freezes and the momentum is exchanged compressed (the paper warms up for 15–25 % of training)"},
    {.key = "optim.variance_freeze_step",
     .field = in_optim<&OptimSection::variance_freeze_step>,
     .range = Range{0, kSteps},
     .optimizers = {K::AdamW},
     .doc = "adamw: after this many steps the second moment stops updating and keeps that step's bias "
            "correction (0: never). Adam's update is then linear in the gradient, so a compressor's error "
            "feedback (`parallel.compression`) sums to the exact gradients over the steps; set it to "
            "`compression.warmup_steps`"},
    {.key = "optim.quantization",
     .field = in_optim<&OptimSection::quantization>,
     .optimizers = {K::Adam8bit},
     .doc = "adam8bit: `\"dynamic\"` (tree) codes, fine near zero, or `\"linear\"`; embeddings and tensors "
            "under 4096 elements keep 32-bit moments, as bitsandbytes does"},
    {.key = "optim.grad_clip",
     .field = in_optim<&OptimSection::grad_clip>,
     .range = Range{.low = 0, .high = kUnbounded, .message = "{key} must be >= 0 (0 disables clipping), got {value}"},
     .doc = "clip the global gradient norm to this (0: no clipping)"},
    {.key = "optim.delayed_update_after",
     .field = in_optim<&OptimSection::delayed_update_after>,
     .range = Range{0, kSteps},
     .doc = "ZeRO-Offload's delayed parameter update from this step on: each step's optimizer update runs on "
            "its own thread while the next step's forward and backward read the weights from before it (one "
            "step stale); steps before it are exact, and evaluations, samples and checkpoints apply a running "
            "update first. adamw and sgd under any layout, the optimizers with per-tensor statistics without "
            "ZeRO, tensor or expert sharding; not onebit_adam or 2bw. 0: off"},
    {.key = "optim.delayed_update_extrapolate",
     .field = in_optim<&OptimSection::delayed_update_extrapolate>,
     .doc = "with optim.delayed_update_after: the overlapped step computes on the weights extrapolated by the "
            "last update's change, w_t + (w_t - w_{t-1}), instead of the stale w_t (SpecTrain's weight "
            "prediction), which takes back most of a one-step-stale Adam's loss; one more copy of the owned "
            "values. Evaluations, samples and checkpoints see the updated weights"},
  };
}

}  // namespace

std::vector<ConfigKey> model_and_training_keys() {
  // The model's rows from its declarations (config/model_keys.h), which read and range-check the
  // section for the trainer and the planner alike.
  std::vector<ConfigKey> keys;
  for (const config::ModelKey& key : config::model_keys()) {
    keys.push_back({.key = key.key, .field = ModelKeyField{&key}, .default_text = key.default_text, .doc = key.doc});
  }
  std::vector<ConfigKey> rest = training_keys();
  keys.insert(keys.end(), std::make_move_iterator(rest.begin()), std::make_move_iterator(rest.end()));
  return keys;
}

}  // namespace tessera::train
