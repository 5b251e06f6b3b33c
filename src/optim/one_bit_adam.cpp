#include "optim/one_bit_adam.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "dist/ops.h"
#include "ops/elementwise.h"
#include "ops/optimizer_update.h"

namespace tessera::optim {

namespace {

using ops::kSignBlock;
using ops::sign_bits_bytes;
using ops::sign_blocks;

// 1-D tensor views of buffers this file holds, for the ops.
Tensor view_of(float* data, size_t n) {
  return Tensor::from_external(data, {static_cast<int64_t>(n)}, DType::F32);
}
Tensor view_of(std::span<float> values) { return view_of(values.data(), values.size()); }
Tensor bytes_of(uint8_t* data, size_t n) {
  return Tensor::from_external(data, {static_cast<int64_t>(n)}, DType::U8);
}

// Compresses `acc` (which keeps the error) into bits and scales.
void sign_compress(std::span<float> acc, std::vector<uint8_t>& bits, std::vector<float>& scales) {
  ops::sign_compress(view_of(acc), bytes_of(bits.data(), bits.size()), view_of(scales.data(), scales.size()));
}

// A chunk's message: its signs, then its scales (chunks start on block boundaries, so both are
// whole bytes and whole blocks of the vector's own message).
size_t message_bytes(size_t elements) { return sign_bits_bytes(elements) + 4 * sign_blocks(elements); }

void pack(std::span<const uint8_t> bits, std::span<const float> scales, uint8_t* out) {
  std::copy(bits.begin(), bits.end(), out);
  std::memcpy(out + bits.size(), scales.data(), scales.size_bytes());
}

void add_unpacked(std::span<float> out, uint8_t* message, float weight) {
  std::vector<float> scales(sign_blocks(out.size()));
  std::memcpy(scales.data(), message + sign_bits_bytes(out.size()), scales.size() * sizeof(float));
  ops::add_sign_decompressed(view_of(out), bytes_of(message, sign_bits_bytes(out.size())),
                             view_of(scales.data(), scales.size()), weight);
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

OneBitAdam::OneBitAdam(MemoryAccountant& memory, const OptimizerConfig& config, int64_t owned_elements,
                       dist::Communicator* group)
    : config_(config), freeze_step_(config.freeze_step) {
  TS_CHECK(owned_elements >= 0, "1-bit Adam over {} elements", owned_elements);
  Exchange all;
  all.group = group;
  if (owned_elements > 0) all.runs.push_back({0, owned_elements});
  set_up(memory, owned_elements, {std::move(all)});
}

OneBitAdam::OneBitAdam(MemoryAccountant& memory, const OptimizerConfig& config,
                       std::span<const Segment> layout, std::vector<dist::Communicator*> groups,
                       std::vector<int> exchange_of)
    : config_(config), freeze_step_(config.freeze_step), exchange_of_(std::move(exchange_of)) {
  TS_CHECK(exchange_of_.size() == layout.size() && !groups.empty(), "1-bit Adam: {} segments, {} exchanges given for "
           "them, over {} groups", layout.size(), exchange_of_.size(), groups.size());
  std::vector<Exchange> exchanges(groups.size());
  for (size_t x = 0; x < groups.size(); ++x) exchanges[x].group = groups[x];
  int64_t at = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const int x = exchange_of_[i];
    TS_CHECK(x >= 0 && static_cast<size_t>(x) < groups.size(), "1-bit Adam: segment {} in exchange {} of {}", i, x,
             groups.size());
    auto& runs = exchanges[static_cast<size_t>(x)].runs;
    if (!runs.empty() && runs.back().second == at) {
      runs.back().second += layout[i].size();
    } else if (layout[i].size() > 0) {
      runs.push_back({at, at + layout[i].size()});
    }
    at += layout[i].size();
  }
  set_up(memory, at, std::move(exchanges));
}

void OneBitAdam::set_up(MemoryAccountant& memory, int64_t owned_elements, std::vector<Exchange> exchanges) {
  TS_CHECK(freeze_step_ >= 0, "1-bit Adam: optim.freeze_step = {} must be 0 or more", freeze_step_);
  exchanges_ = std::move(exchanges);
  for (Exchange& x : exchanges_) {
    x.ranks = x.group == nullptr ? 1 : x.group->size();
    x.rank = x.group == nullptr ? 0 : x.group->rank();
    for (const auto& [begin, end] : x.runs) x.elements += end - begin;
    x.chunk_begin = one_bit_adam_chunks(static_cast<size_t>(x.elements), x.ranks);
    const auto mine = static_cast<int64_t>(x.chunk_begin[static_cast<size_t>(x.rank) + 1] -
                                           x.chunk_begin[static_cast<size_t>(x.rank)]);
    x.server_error = Tensor::zeros({mine}, DType::F32, MemoryTag::Optimizer, memory);
  }
  m_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  v_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
  worker_error_ = Tensor::zeros({owned_elements}, DType::F32, MemoryTag::Optimizer, memory);
}

void OneBitAdam::step(float lr, std::span<const Segment> segments) {
  TS_CHECK(total_elements(segments) == owned_elements(),
           "1-bit Adam: the segments hold {} elements but its state covers {}: the owned elements changed",
           total_elements(segments), owned_elements());
  const bool compressed = next_step_compressed();
  ++step_;
  auto state = [](const Tensor& t, int64_t at, const Segment& s) { return t.slice(0, at, at + s.size()); };
  if (!compressed) {
    int64_t at = 0;
    for (const Segment& s : segments) {
      const float wd = is_weight(*s.param) ? config_.weight_decay : 0.0f;
      ops::adamw_update(s.values(), s.grads(), state(m_, at, s), state(v_, at, s),
                        {lr, config_.beta1, config_.beta2, config_.eps, wd, step_, 0});
      at += s.size();
    }
    return;
  }
  // The local momentum from this rank's local-batch mean gradient, R g_r (the gradients of the
  // ranks of the segment's group sum to the global batch's mean), then its compressed average.
  TS_CHECK(exchange_of_.empty() || exchange_of_.size() == segments.size(),
           "1-bit Adam: {} segments, built for {}", segments.size(), exchange_of_.size());
  const float beta1 = config_.beta1;
  int64_t at = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    const auto local = static_cast<float>(exchanges_[exchange_of_.empty() ? 0 : static_cast<size_t>(exchange_of_[k])].ranks);
    ops::one_bit_adam_momentum(state(m_, at, s), s.grads(), beta1, local);
    at += s.size();
  }
  for (Exchange& x : exchanges_) compressed_average(x, std::span(m_.data<float>(), static_cast<size_t>(m_.numel())));
  // Adam's update with the frozen second moment and its frozen bias correction.
  const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(freeze_step_));
  const auto step_size = static_cast<float>(static_cast<double>(lr) / bias1);
  const auto bias2_sqrt = static_cast<float>(std::sqrt(bias2 > 0 ? bias2 : 1.0));
  at = 0;
  for (const Segment& s : segments) {
    const auto decay =
        static_cast<float>(1.0 - static_cast<double>(lr) * (is_weight(*s.param) ? config_.weight_decay : 0.0f));
    ops::one_bit_adam_apply(s.values(), state(m_, at, s), state(v_, at, s),
                            {step_size, bias2_sqrt, config_.eps, decay});
    at += s.size();
  }
}

void OneBitAdam::compressed_average(Exchange& x, std::span<float> m) {
  const auto R = static_cast<size_t>(x.ranks), me = static_cast<size_t>(x.rank);
  const size_t n = static_cast<size_t>(x.elements);
  const std::vector<size_t>& chunk_begin = x.chunk_begin;
  // The exchange's elements in a row (a copy, unless they are the whole vector), and their errors.
  const bool whole = x.runs.size() == 1 && x.runs.front().first == 0 && static_cast<size_t>(x.runs.front().second) == m.size();
  std::vector<float> packed_values, packed_worker;
  std::span<float> values = m;
  float* worker = worker_error_.data<float>();
  if (!whole) {
    packed_values.reserve(n);
    packed_worker.reserve(n);
    for (const auto& [begin, end] : x.runs) {
      packed_values.insert(packed_values.end(), m.begin() + begin, m.begin() + end);
      packed_worker.insert(packed_worker.end(), worker + begin, worker + end);
    }
    values = packed_values;
    worker = packed_worker.data();
  }
  // Worker stage: compress m_r + e_r whole (chunks start on block boundaries, so chunk k's message
  // is a run of the whole one's bits and scales), keep the error.
  ops::add_inplace(view_of(worker, n), view_of(values));
  std::vector<uint8_t> bits(sign_bits_bytes(n));
  std::vector<float> scales(sign_blocks(n));
  sign_compress(std::span(worker, n), bits, scales);
  std::vector<size_t> sizes(R), offsets(R + 1, 0);
  for (size_t k = 0; k < R; ++k) {
    sizes[k] = message_bytes(chunk_begin[k + 1] - chunk_begin[k]);
    offsets[k + 1] = offsets[k] + sizes[k];
  }
  std::vector<uint8_t> sent(offsets[R]);
  for (size_t k = 0; k < R; ++k) {
    const size_t lo = chunk_begin[k], hi = chunk_begin[k + 1];
    pack(std::span(bits).subspan(lo / 8, sign_bits_bytes(hi - lo)),
         std::span(scales).subspan(lo / kSignBlock, sign_blocks(hi - lo)), sent.data() + offsets[k]);
  }
  const size_t lo = chunk_begin[me], hi = chunk_begin[me + 1], mine = hi - lo;
  std::vector<uint8_t> received(R * sizes[me]);
  if (x.group != nullptr && R > 1) {
    const std::vector<size_t> from_each(R, sizes[me]);
    x.group->all_to_all(sent.data(), sizes, received.data(), from_each, DType::U8)->wait();
  } else {
    std::copy(sent.begin(), sent.end(), received.begin());
  }
  // Server stage: this rank's chunk averaged over the members, compressed again with its own error.
  float* server = x.server_error.data<float>();
  const std::span<float> average(server, mine);
  for (size_t r = 0; r < R; ++r) add_unpacked(average, received.data() + r * sizes[me], 1.0f / static_cast<float>(R));
  std::vector<uint8_t> chunk_bits(sign_bits_bytes(mine));
  std::vector<float> chunk_scales(sign_blocks(mine));
  sign_compress(average, chunk_bits, chunk_scales);
  std::vector<uint8_t> my_message(sizes[me]);
  pack(chunk_bits, chunk_scales, my_message.data());
  std::vector<uint8_t> gathered(offsets[R]);
  if (x.group != nullptr && R > 1) {
    x.group->all_gather(my_message.data(), gathered.data(), sizes, DType::U8)->wait();
  } else {
    gathered = my_message;
  }
  std::fill(values.begin(), values.end(), 0.0f);
  for (size_t k = 0; k < R; ++k) {
    add_unpacked(values.subspan(chunk_begin[k], chunk_begin[k + 1] - chunk_begin[k]), gathered.data() + offsets[k],
                 1.0f);
  }
  if (whole) return;
  size_t at = 0;
  for (const auto& [begin, end] : x.runs) {
    const auto length = static_cast<size_t>(end - begin);
    std::copy_n(packed_values.begin() + static_cast<std::ptrdiff_t>(at), length, m.begin() + begin);
    std::copy_n(packed_worker.begin() + static_cast<std::ptrdiff_t>(at), length, worker_error_.data<float>() + begin);
    at += length;
  }
}

StateDict OneBitAdam::state_dict() { return {step_, {{"m", m_, {}}, {"v", v_, {}}}}; }

void OneBitAdam::load_state_dict(StateDict state) {
  for (auto [name, mine] : {std::pair<const char*, Tensor*>{"m", &m_}, {"v", &v_}}) {
    load_state_tensor(state, name, *mine, "1-bit Adam");
  }
  step_ = state.steps;
}

std::vector<std::pair<std::string, Tensor>> OneBitAdam::rank_state_tensors() {
  std::vector<std::pair<std::string, Tensor>> out{{"onebit_adam.worker_error", worker_error_}};
  for (size_t x = 0; x < exchanges_.size(); ++x) {
    out.emplace_back(x == 0 ? std::string("onebit_adam.server_error") : fmt::format("onebit_adam.exchange{}.server_error", x),
                     exchanges_[x].server_error);
  }
  return out;
}

void OneBitAdam::set_rank_state_step(int64_t step) {
  TS_CHECK(step == step_, "1-bit Adam: this rank's errors were saved at step {} but its moments at step {}; the "
           "checkpoint's files do not belong together", step, step_);
}

}  // namespace tessera::optim
