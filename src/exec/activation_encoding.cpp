#include "exec/activation_encoding.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/check.h"
#include "kernels/cpu/activation_codec.h"

namespace tessera::exec {

namespace {

bool is_floating(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

template <class F>
decltype(auto) with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::BF16: return f(bf16{});
    case DType::F16: return f(f16{});
    default: return f(float{});
  }
}

}  // namespace

std::string_view activation_encoding_name(ActivationEncoding encoding) {
  switch (encoding) {
    case ActivationEncoding::None: return "none";
    case ActivationEncoding::Lossless: return "lossless";
    case ActivationEncoding::Gist: return "gist";
    case ActivationEncoding::Fp8: return "fp8";
  }
  return "?";
}

ActivationEncoding parse_activation_encoding(std::string_view name) {
  for (ActivationEncoding e : {ActivationEncoding::None, ActivationEncoding::Lossless, ActivationEncoding::Gist,
                               ActivationEncoding::Fp8}) {
    if (name == activation_encoding_name(e)) return e;
  }
  TS_FAIL("memory.activation_encoding = \"{}\" is not known; use \"none\", \"lossless\", \"gist\" or \"fp8\"", name);
}

std::string describe(ActivationEncoding encoding) {
  std::string_view how;
  switch (encoding) {
    case ActivationEncoding::None: how = "as they are"; break;
    case ActivationEncoding::Lossless: how = "sign bits or a sparse form where they hold, the same bits"; break;
    case ActivationEncoding::Gist: how = "sign bits or a sparse form where they hold, f32 as bf16 elsewhere"; break;
    case ActivationEncoding::Fp8: how = "FP8 E4M3 with a scale per 128 values, sign bits where they hold"; break;
  }
  return fmt::format("{}: {}", activation_encoding_name(encoding), how);
}

std::string_view encoded_form_name(EncodedForm form) {
  switch (form) {
    case EncodedForm::Dense: return "dense";
    case EncodedForm::Sign: return "sign";
    case EncodedForm::Sparse: return "sparse";
    case EncodedForm::Bf16: return "bf16";
    case EncodedForm::Fp8: return "fp8";
  }
  return "?";
}

int64_t encoded_stash_bytes(ActivationEncoding encoding, int64_t values, int64_t sign, size_t element_bytes) {
  const auto es = static_cast<int64_t>(element_bytes);
  if (encoding == ActivationEncoding::None) return values + sign;
  const int64_t signs = static_cast<int64_t>(kernels::sign_bytes(static_cast<size_t>(sign / es)));
  switch (encoding) {
    case ActivationEncoding::Fp8: {
      const int64_t n = values / es;
      return n + static_cast<int64_t>(kernels::fp8_blocks(static_cast<size_t>(n)) * sizeof(float)) + signs;
    }
    case ActivationEncoding::Gist: return (es == 4 ? values / 2 : values) + signs;
    default: return values + signs;
  }
}

int64_t EncodingCounts::total_dense() const {
  int64_t s = 0;
  for (int64_t b : dense_bytes) s += b;
  return s;
}

int64_t EncodingCounts::total_encoded() const {
  int64_t s = 0;
  for (int64_t b : encoded_bytes) s += b;
  return s;
}

ActivationEncoder::ActivationEncoder(ActivationEncoding encoding, MemoryAccountant& memory)
    : encoding_(encoding), memory_(memory) {}

ActivationEncoder::~ActivationEncoder() = default;

std::string_view ActivationEncoder::name() const {
  switch (encoding_) {
    case ActivationEncoding::None: return "activation encoding (none)";
    case ActivationEncoding::Lossless: return "activation encoding (lossless)";
    case ActivationEncoding::Gist: return "activation encoding (gist)";
    case ActivationEncoding::Fp8: return "activation encoding (fp8)";
  }
  return "activation encoding";
}

void ActivationEncoder::begin(const Program& program) {
  TS_CHECK(units_.empty(), "activation encoding: a program begins while {} units' activations of the last one are "
           "still encoded", units_.size());
}

void ActivationEncoder::finish(const Program& program) {
  TS_CHECK(units_.empty(), "activation encoding: the program finished with {} units' activations still encoded (a "
           "backward did not run)", units_.size());
}

EncodingCounts ActivationEncoder::take_counts() { return std::exchange(counts_, EncodingCounts{}); }

EncodedForm ActivationEncoder::choose(const Storage& storage, DType dtype, nn::SavedUse use, int64_t& nonzero) const {
  nonzero = 0;
  if (encoding_ == ActivationEncoding::None || use == nn::SavedUse::Statistics) return EncodedForm::Dense;
  if (use == nn::SavedUse::Sign) return EncodedForm::Sign;
  const size_t es = dtype_size(dtype), n = storage.bytes() / es;
  if (encoding_ == ActivationEncoding::Fp8) return EncodedForm::Fp8;
  // What the tensor costs if the sparse form does not pay: dense, or Gist's reduced precision.
  const bool reduce = encoding_ == ActivationEncoding::Gist && dtype == DType::F32;
  const size_t otherwise = reduce ? n * 2 : n * es;
  // The sparse form pays while bitmap + values < otherwise: counting stops past that many values.
  const size_t bitmap = kernels::sign_bytes(n);
  const size_t most = otherwise > bitmap ? (otherwise - bitmap - 1) / es : 0;
  const size_t counted = otherwise > bitmap ? kernels::count_nonzero_until(storage.data(), n, es, most) : most + 1;
  if (counted <= most) {
    nonzero = static_cast<int64_t>(counted);
    return EncodedForm::Sparse;
  }
  return reduce ? EncodedForm::Bf16 : EncodedForm::Dense;
}

Tensor ActivationEncoder::encode(const Storage& storage, DType dtype, EncodedForm form, int64_t elements,
                                 int64_t nonzero) {
  const size_t n = static_cast<size_t>(elements), es = dtype_size(dtype);
  size_t bytes = 0;
  switch (form) {
    case EncodedForm::Sign: bytes = kernels::sign_bytes(n); break;
    case EncodedForm::Sparse: bytes = kernels::sign_bytes(n) + static_cast<size_t>(nonzero) * es; break;
    case EncodedForm::Bf16: bytes = n * 2; break;
    case EncodedForm::Fp8: bytes = n + kernels::fp8_blocks(n) * sizeof(float); break;
    case EncodedForm::Dense: TS_FAIL("activation encoding: a dense storage is not encoded");
  }
  Tensor code = Tensor::empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::U8, MemoryTag::Activations,
                              memory_);
  auto* out = code.data<uint8_t>();
  const void* in = storage.data();
  switch (form) {
    case EncodedForm::Sign:
      with_float_type(dtype, [&]<class T>(T) { kernels::sign_encode(out, static_cast<const T*>(in), n); });
      break;
    case EncodedForm::Sparse: kernels::sparse_encode(out, out + kernels::sign_bytes(n), in, n, es); break;
    case EncodedForm::Bf16: convert_f32_to_bf16(reinterpret_cast<bf16*>(out), static_cast<const float*>(in), n); break;
    case EncodedForm::Fp8:
      // The scales first: they are 4-byte aligned where the byte tensor starts.
      with_float_type(dtype, [&]<class T>(T) {
        kernels::fp8_encode(out + kernels::fp8_blocks(n) * sizeof(float), reinterpret_cast<float*>(out),
                            static_cast<const T*>(in), n);
      });
      break;
    case EncodedForm::Dense: break;
  }
  return code;
}

void ActivationEncoder::decode(Encoded& e) {
  const size_t n = static_cast<size_t>(e.elements), es = dtype_size(e.dtype);
  void* into = e.storage->make_resident();
  const uint8_t* in = e.code.data<uint8_t>();
  switch (e.form) {
    case EncodedForm::Sign:
      with_float_type(e.dtype, [&]<class T>(T) { kernels::sign_decode(static_cast<T*>(into), in, n); });
      break;
    case EncodedForm::Sparse: kernels::sparse_decode(into, in, in + kernels::sign_bytes(n), n, es); break;
    case EncodedForm::Bf16: convert_bf16_to_f32(static_cast<float*>(into), reinterpret_cast<const bf16*>(in), n); break;
    case EncodedForm::Fp8:
      with_float_type(e.dtype, [&]<class T>(T) {
        kernels::fp8_decode(static_cast<T*>(into), in + kernels::fp8_blocks(n) * sizeof(float),
                            reinterpret_cast<const float*>(in), n);
      });
      break;
    case EncodedForm::Dense: break;
  }
  e.code = Tensor();
}

void ActivationEncoder::after(const Event& event) {
  const Action& a = event.action();
  if (encoding_ == ActivationEncoding::None || a.phase != Phase::Forward || event.saved == nullptr ||
      backward_follows(*event.program, event.index)) {
    return;
  }
  // Each storage once, with the strictest use of its views (any view read for its values makes it
  // Values; any statistics view keeps it as it is) and the dtype they share.
  struct Candidate {
    std::shared_ptr<Storage> storage;
    DType dtype;
    nn::SavedUse use;
    bool mixed_dtypes = false;
  };
  std::vector<Candidate> candidates;
  for (const nn::SavedTensor& t : *event.saved) {
    const std::shared_ptr<Storage>& s = t.tensor.storage();
    auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.storage == s; });
    if (it == candidates.end()) {
      candidates.push_back({s, t.tensor.dtype(), t.use});
      continue;
    }
    it->mixed_dtypes = it->mixed_dtypes || it->dtype != t.tensor.dtype();
    if (t.use == nn::SavedUse::Statistics || it->use == nn::SavedUse::Statistics) {
      it->use = nn::SavedUse::Statistics;
    } else if (t.use == nn::SavedUse::Values) {
      it->use = nn::SavedUse::Values;
    }
  }
  std::vector<const Storage*>& held = units_[{a.microbatch, a.unit}];
  std::vector<nn::SavedTensor> handed_on;
  for (const Candidate& c : candidates) {
    const Storage* key = c.storage.get();
    const auto views_of = [&](std::vector<nn::SavedTensor>& into) {
      for (const nn::SavedTensor& t : *event.saved) {
        if (t.tensor.storage().get() == key) into.push_back(t);
      }
    };
    if (encoded_.contains(key)) {  // saved by another unit too: encoded once, decoded by the first backward
      held.push_back(key);
      handed_on.push_back({encoded_.at(key).code, nn::SavedUse::Values});
      continue;
    }
    int64_t nonzero = 0;
    const bool encodable = is_floating(c.dtype) && !c.mixed_dtypes && c.storage->movable() &&
                           c.storage->tag() == MemoryTag::Activations && c.storage->bytes() > 0 &&
                           c.storage->tier() == Tier::Compute && !c.storage->encoded();
    const EncodedForm form = encodable ? choose(*c.storage, c.dtype, c.use, nonzero) : EncodedForm::Dense;
    if (form == EncodedForm::Dense) {
      views_of(handed_on);
      continue;
    }
    const int64_t elements = static_cast<int64_t>(c.storage->bytes() / dtype_size(c.dtype));
    Encoded e{c.storage, encode(*c.storage, c.dtype, form, elements, nonzero), form, c.dtype, elements, nonzero};
    const auto f = static_cast<size_t>(form);
    counts_.dense_bytes[f] += static_cast<int64_t>(c.storage->bytes());
    counts_.encoded_bytes[f] += static_cast<int64_t>(e.code.nbytes());
    c.storage->release_encoded();
    handed_on.push_back({e.code, nn::SavedUse::Values});
    encoded_.emplace(key, std::move(e));
    held.push_back(key);
  }
  if (held.empty()) units_.erase({a.microbatch, a.unit});
  *event.saved = std::move(handed_on);
}

void ActivationEncoder::before(const Event& event) {
  const Action& a = event.action();
  if (!writes_gradients(a.phase) || a.phase == Phase::BackwardWeight) return;
  decode_unit({a.microbatch, a.unit});
}

void ActivationEncoder::decode_unit(const UnitKey& key) {
  const auto it = units_.find(key);
  if (it == units_.end()) return;
  const std::vector<const Storage*> held = std::move(it->second);
  units_.erase(it);
  for (const Storage* s : held) {
    const auto e = encoded_.find(s);
    if (e == encoded_.end()) continue;  // another unit's backward decoded it
    decode(e->second);
    encoded_.erase(e);
    // Back in compute memory for good: a unit that saved it too finds it there.
    for (auto& [other, storages] : units_) std::erase(storages, s);
  }
}

}  // namespace tessera::exec
