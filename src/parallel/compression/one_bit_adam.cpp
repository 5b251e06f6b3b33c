#include "parallel/compression/one_bit_adam.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "dist/ops.h"
#include "kernels/cpu/adamw.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

// A chunk's message: its signs, then its scales (chunks start on block boundaries, so both are
// whole bytes and whole blocks of the vector's own message).
size_t message_bytes(size_t elements) { return sign_bits_bytes(elements) + 4 * sign_blocks(elements); }

void pack(std::span<const uint8_t> bits, std::span<const float> scales, uint8_t* out) {
  std::copy(bits.begin(), bits.end(), out);
  std::memcpy(out + bits.size(), scales.data(), scales.size_bytes());
}

void add_unpacked(std::span<float> out, const uint8_t* message, float weight) {
  std::vector<float> scales(sign_blocks(out.size()));
  std::memcpy(scales.data(), message + sign_bits_bytes(out.size()), scales.size() * sizeof(float));
  add_sign_decompressed(out, message, scales.data(), weight);
}

}  // namespace

std::vector<size_t> one_bit_adam_chunks(size_t elements, int ranks) {
  TS_CHECK(ranks >= 1, "1-bit Adam over {} ranks", ranks);
  const size_t blocks = sign_blocks(elements), R = static_cast<size_t>(ranks);
  std::vector<size_t> begin(R + 1);
  for (size_t k = 0; k <= R; ++k) begin[k] = std::min(elements, (blocks * k / R) * kSignBlock);
  return begin;
}

uint64_t one_bit_adam_wire_bytes(size_t elements, int ranks, int rank) {
  const std::vector<size_t> begin = one_bit_adam_chunks(elements, ranks);
  std::vector<size_t> messages;
  for (size_t k = 0; k + 1 < begin.size(); ++k) messages.push_back(message_bytes(begin[k + 1] - begin[k]));
  return dist::all_to_all_bytes(messages, 1, rank) + dist::all_gather_bytes(messages, 1, rank);
}

OneBitAdam::OneBitAdam(MemoryAccountant& memory, const optim::OptimizerConfig& config, int64_t owned_elements,
                       dist::Communicator* group)
    : config_(config), freeze_step_(config.freeze_step), group_(group) {
  TS_CHECK(owned_elements >= 0, "1-bit Adam over {} elements", owned_elements);
  TS_CHECK(freeze_step_ >= 0, "1-bit Adam: optim.freeze_step = {} must be 0 or more", freeze_step_);
  ranks_ = group == nullptr ? 1 : group->size();
  rank_ = group == nullptr ? 0 : group->rank();
  chunk_begin_ = one_bit_adam_chunks(static_cast<size_t>(owned_elements), ranks_);
  const auto mine = static_cast<int64_t>(chunk_begin_[static_cast<size_t>(rank_) + 1] -
                                         chunk_begin_[static_cast<size_t>(rank_)]);
  m_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  worker_error_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  server_error_ = Tensor::zeros({mine}, DType::F32, MemoryTag::Optimizer, memory);
}

void OneBitAdam::step(float lr, std::span<const optim::Segment> segments) {
  TS_CHECK(optim::total_elements(segments) == owned_elements(),
           "1-bit Adam: the segments hold {} elements but its state covers {}: the owned elements changed",
           optim::total_elements(segments), owned_elements());
  const bool compressed = next_step_compressed();
  ++step_;
  float* m = m_.data<float>();
  float* v = v_.data<float>();
  if (!compressed) {
    int64_t at = 0;
    for (const optim::Segment& s : segments) {
      const float wd = optim::is_weight(*s.param) ? config_.weight_decay : 0.0f;
      kernels::adamw_update(s.value, s.grad, m + at, v + at, static_cast<size_t>(s.size()), lr, config_.beta1,
                            config_.beta2, config_.eps, wd, step_);
      at += s.size();
    }
    return;
  }
  // The local momentum from this rank's local-batch mean gradient, R g_r (the gradients of the
  // ranks sum to the global batch's mean), then its compressed average.
  const float beta1 = config_.beta1, local = static_cast<float>(ranks_);
  int64_t at = 0;
  for (const optim::Segment& s : segments) {
    for (int64_t i = 0; i < s.size(); ++i) m[at + i] = beta1 * m[at + i] + (1.0f - beta1) * (local * s.grad[i]);
    at += s.size();
  }
  compressed_average(std::span(m, static_cast<size_t>(m_.numel())));
  // Adam's update with the frozen second moment and its frozen bias correction.
  const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(freeze_step_));
  const auto step_size = static_cast<float>(static_cast<double>(lr) / bias1);
  const auto bias2_sqrt = static_cast<float>(std::sqrt(bias2 > 0 ? bias2 : 1.0));
  at = 0;
  for (const optim::Segment& s : segments) {
    const auto decay =
        static_cast<float>(1.0 - static_cast<double>(lr) * (optim::is_weight(*s.param) ? config_.weight_decay : 0.0f));
    for (int64_t i = 0; i < s.size(); ++i) {
      const float denom = std::sqrt(v[at + i]) / bias2_sqrt + config_.eps;
      s.value[i] = s.value[i] * decay - step_size * m[at + i] / denom;
    }
    at += s.size();
  }
}

void OneBitAdam::compressed_average(std::span<float> values) {
  const auto R = static_cast<size_t>(ranks_), me = static_cast<size_t>(rank_);
  const size_t n = values.size();
  // Worker stage: compress m_r + e_r whole (chunks start on block boundaries, so chunk k's message
  // is a run of the whole one's bits and scales), keep the error.
  float* worker = worker_error_.data<float>();
  for (size_t i = 0; i < n; ++i) worker[i] += values[i];
  std::vector<uint8_t> bits(sign_bits_bytes(n));
  std::vector<float> scales(sign_blocks(n));
  sign_compress(std::span(worker, n), bits.data(), scales.data());
  std::vector<size_t> sizes(R), offsets(R + 1, 0);
  for (size_t k = 0; k < R; ++k) {
    sizes[k] = message_bytes(chunk_begin_[k + 1] - chunk_begin_[k]);
    offsets[k + 1] = offsets[k] + sizes[k];
  }
  std::vector<uint8_t> sent(offsets[R]);
  for (size_t k = 0; k < R; ++k) {
    const size_t lo = chunk_begin_[k], hi = chunk_begin_[k + 1];
    pack(std::span(bits).subspan(lo / 8, sign_bits_bytes(hi - lo)),
         std::span(scales).subspan(lo / kSignBlock, sign_blocks(hi - lo)), sent.data() + offsets[k]);
  }
  const size_t lo = chunk_begin_[me], hi = chunk_begin_[me + 1], mine = hi - lo;
  std::vector<uint8_t> received(R * sizes[me]);
  if (group_ != nullptr && R > 1) {
    const std::vector<size_t> from_each(R, sizes[me]);
    group_->all_to_all(sent.data(), sizes, received.data(), from_each, DType::U8)->wait();
  } else {
    std::copy(sent.begin(), sent.end(), received.begin());
  }
  // Server stage: this rank's chunk averaged over the members, compressed again with its own error.
  float* server = server_error_.data<float>();
  const std::span<float> average(server, mine);
  for (size_t r = 0; r < R; ++r) add_unpacked(average, received.data() + r * sizes[me], 1.0f / static_cast<float>(R));
  std::vector<uint8_t> chunk_bits(sign_bits_bytes(mine));
  std::vector<float> chunk_scales(sign_blocks(mine));
  sign_compress(average, chunk_bits.data(), chunk_scales.data());
  std::vector<uint8_t> my_message(sizes[me]);
  pack(chunk_bits, chunk_scales, my_message.data());
  std::vector<uint8_t> gathered(offsets[R]);
  if (group_ != nullptr && R > 1) {
    group_->all_gather(my_message.data(), gathered.data(), sizes, DType::U8)->wait();
  } else {
    gathered = my_message;
  }
  std::fill(values.begin(), values.end(), 0.0f);
  for (size_t k = 0; k < R; ++k) {
    add_unpacked(values.subspan(chunk_begin_[k], chunk_begin_[k + 1] - chunk_begin_[k]), gathered.data() + offsets[k],
                 1.0f);
  }
}

optim::StateDict OneBitAdam::state_dict() { return {step_, {{"m", m_, {}}, {"v", v_, {}}}}; }

void OneBitAdam::load_state_dict(optim::StateDict state) {
  for (auto [name, mine] : {std::pair<const char*, Tensor*>{"m", &m_}, {"v", &v_}}) {
    optim::load_state_tensor(state, name, *mine, "1-bit Adam");
  }
  step_ = state.steps;
}

std::vector<std::pair<std::string, Tensor>> OneBitAdam::rank_state_tensors() {
  return {{"onebit_adam.worker_error", worker_error_}, {"onebit_adam.server_error", server_error_}};
}

void OneBitAdam::set_rank_state_step(int64_t step) {
  TS_CHECK(step == step_, "1-bit Adam: this rank's errors were saved at step {} but its moments at step {}; the "
           "checkpoint's files do not belong together", step, step_);
}

}  // namespace tessera::parallel
