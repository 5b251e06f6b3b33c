#pragma once
// Encoded activations (memory.activation_encoding; Gist, Jain et al. 2018): what a unit saved for
// its backward waits in a smaller form from the end of its forward (the forward's last use of it)
// to the start of its backward.
//
//   none      nothing is encoded.
//   lossless  only the encodings that give the same bits back: a tensor the backward reads only
//             for its sign (a ReLU's input) as one bit an element; a tensor with more zeros than
//             its sparse form costs (a ReLU's output) as a bitmap and its non-zero values.
//   gist      the lossless encodings where they hold, and Gist's delayed precision reduction
//             elsewhere: f32 values wait as bf16 (16-bit activations stay as they are).
//   fp8       every tensor that is not read only for its sign waits as FP8 E4M3 with one scale per
//             block of 128 (kernels/cpu/activation_codec.h).
// Per-row statistics (norms' mean and 1/σ, log-sum-exp), integer tensors and the head's
// (whose backward follows its forward at once) stay as they are. The unit's modules say how each
// saved tensor is read (nn/saved_tensor.h).
//
// A transform of the chain's activation-encoding slot, inside activation placement: after a
// training forward it encodes each saved storage, frees the dense copy and hands the encoded
// tensors on in the event, so offloading writes the encoded bytes; before the unit's backward (its
// input half when split), once placement has brought them back, it decodes them into the
// storages the unit's tensors still name. A storage two units saved is encoded once.
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exec/transform.h"

namespace tessera::exec {

enum class ActivationEncoding : uint8_t { None, Lossless, Gist, Fp8 };
std::string_view activation_encoding_name(ActivationEncoding encoding);  // "none", "lossless", "gist", "fp8"
ActivationEncoding parse_activation_encoding(std::string_view name);     // throws with the list of names
// "fp8: FP8 E4M3, a scale per 128 values", for the start line.
std::string describe(ActivationEncoding encoding);

// What a unit's stash takes encoded, for the predictions (exec/program_memory.h): `values` bytes
// read for their values and `sign` bytes read for their sign, in elements of `element_bytes`. The
// forms whose size does not depend on the values (sign, bf16, fp8) are counted exactly but for
// fp8's scales (counted as if the stash were one storage); where a sparse form may be chosen, the
// size without it: an upper bound.
int64_t encoded_stash_bytes(ActivationEncoding encoding, int64_t values, int64_t sign, size_t element_bytes);

// The form one saved storage waits in.
enum class EncodedForm : uint8_t { Dense, Sign, Sparse, Bf16, Fp8 };
inline constexpr size_t kEncodedForms = 5;
std::string_view encoded_form_name(EncodedForm form);  // "dense", "sign", "sparse", "bf16", "fp8"

// What the encoder did since it was created (or the counts were last taken): the bytes of the
// storages it encoded, before and after, by the form they took.
struct EncodingCounts {
  std::array<int64_t, kEncodedForms> dense_bytes{};
  std::array<int64_t, kEncodedForms> encoded_bytes{};
  int64_t total_dense() const;
  int64_t total_encoded() const;
};

class ActivationEncoder final : public Transform {
 public:
  ActivationEncoder(ActivationEncoding encoding, MemoryAccountant& memory);
  ~ActivationEncoder() override;

  std::string_view name() const override;
  void begin(const Program& program) override;
  void before(const Event& event) override;
  void after(const Event& event) override;
  void finish(const Program& program) override;

  ActivationEncoding encoding() const { return encoding_; }
  // The counts since the last call, and zero them.
  EncodingCounts take_counts();

 private:
  struct Encoded {
    std::shared_ptr<Storage> storage;  // the dense storage the unit's tensors name, released meanwhile
    Tensor code;                       // the encoded bytes [bytes] u8
    EncodedForm form = EncodedForm::Dense;
    DType dtype = DType::F32;
    int64_t elements = 0;
    int64_t nonzero = 0;  // Sparse: the values after the bitmap
  };
  using UnitKey = std::pair<int, int>;  // (microbatch, unit)

  EncodedForm choose(const Storage& storage, DType dtype, nn::SavedUse use, int64_t& nonzero) const;
  Tensor encode(const Storage& storage, DType dtype, EncodedForm form, int64_t elements, int64_t nonzero);
  void decode(Encoded& e);
  void decode_unit(const UnitKey& key);

  ActivationEncoding encoding_;
  MemoryAccountant& memory_;
  std::map<const Storage*, Encoded> encoded_;
  std::map<UnitKey, std::vector<const Storage*>> units_;
  EncodingCounts counts_;
};

}  // namespace tessera::exec
