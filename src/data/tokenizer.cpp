#include "data/tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>
#include <iterator>
#include <system_error>

#include "core/atomic_file.h"
#include "core/check.h"

namespace tessera::data {

static_assert(sizeof(int) == sizeof(int32_t), "SentencePiece ids are int; tessera stores int32");

Tokenizer::Tokenizer() : processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  // Opened as a file a folder "opens", and reading it throws a stream error that names nothing.
  TS_CHECK(!std::filesystem::is_directory(path, ec), "tokenizer path {} is a folder; give a SentencePiece .model file",
           path.string());
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot open tokenizer file {}: it does not exist or is not readable; give a SentencePiece "
           ".model file, or leave the tokenizer out to train one on the corpus", path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TS_CHECK(!in.bad(), "error while reading tokenizer file {}", path.string());
  return from_bytes(std::move(bytes), path.string());
}

Tokenizer Tokenizer::from_bytes(std::string serialized, std::string_view what) {
  TS_CHECK(!serialized.empty(), "tokenizer file {} is empty; give a SentencePiece .model file", what);
  Tokenizer t;
  const auto status = t.processor_->LoadFromSerializedProto(serialized);
  TS_CHECK(status.ok(),
           "tokenizer file {} is corrupt or not a SentencePiece model ({} bytes; SentencePiece says: {}); "
           "prepare the data again or give an intact .model file",
           what, serialized.size(), status.ToString());
  TS_CHECK(t.processor_->GetPieceSize() > 0, "tokenizer file {} has an empty vocabulary", what);
  t.serialized_ = std::move(serialized);
  t.name_ = std::string(what);
  t.newline_ids_ = t.encode_whole("\n");
  t.splits_at_newlines_ = t.probe_newline_split();
  return t;
}

// Whether line-by-line encoding equals whole-text encoding. No piece may contain a newline (else
// a merge could cross it); the probes catch a dummy prefix ("▁" added at the start of each
// encode call) and whitespace normalization, which make the two differ.
bool Tokenizer::probe_newline_split() const {
  const int n = processor_->GetPieceSize();
  for (int id = 0; id < n; ++id) {
    if (processor_->IsByte(id) || processor_->IsControl(id) || processor_->IsUnknown(id)) continue;
    if (processor_->IdToPiece(id).find('\n') != std::string::npos) return false;
  }
  if (decode(newline_ids_) != "\n") return false;
  const std::string_view parts[] = {"x", " x", "a  b ", "", "\t", "Ab1"};
  for (std::string_view a : parts) {
    for (std::string_view b : parts) {
      std::vector<int32_t> joined = encode_whole(a);
      joined.insert(joined.end(), newline_ids_.begin(), newline_ids_.end());
      const std::vector<int32_t> tail = encode_whole(b);
      joined.insert(joined.end(), tail.begin(), tail.end());
      const std::string text = std::string(a) + "\n" + std::string(b);
      if (encode_whole(text) != joined) return false;
    }
  }
  return true;
}

std::vector<int32_t> Tokenizer::encode_whole(std::string_view text) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  TS_CHECK(status.ok(), "encoding {} bytes with tokenizer {} failed: {}", text.size(), name_, status.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (!splits_at_newlines_) return encode_whole(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3);
  std::vector<int> ids;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (!line.empty()) {
      const auto status = processor_->Encode(line, &ids);
      TS_CHECK(status.ok(), "encoding {} bytes with tokenizer {} failed: {}", line.size(), name_, status.ToString());
      out.insert(out.end(), ids.begin(), ids.end());
    }
    if (end == std::string_view::npos) break;
    out.insert(out.end(), newline_ids_.begin(), newline_ids_.end());
    text.remove_prefix(end + 1);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  const int32_t vocab = static_cast<int32_t>(vocab_size());
  std::vector<int> v;
  v.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    TS_CHECK(ids[i] >= 0 && ids[i] < vocab, "cannot decode token id {} at position {}: the vocabulary of {} has ids 0..{}",
             ids[i], i, name_, vocab - 1);
    v.push_back(ids[i]);
  }
  std::string text;
  const auto status = processor_->Decode(v, &text);
  TS_CHECK(status.ok(), "decoding {} ids with tokenizer {} failed: {}", ids.size(), name_, status.ToString());
  return text;
}

int64_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int32_t Tokenizer::bos_id() const { return processor_->bos_id(); }
int32_t Tokenizer::eos_id() const { return processor_->eos_id(); }
int32_t Tokenizer::unk_id() const { return processor_->unk_id(); }

std::string Tokenizer::piece(int32_t id) const {
  TS_CHECK(id >= 0 && id < vocab_size(), "token id {} is outside the vocabulary of {} (size {})", id, name_,
           vocab_size());
  return processor_->IdToPiece(id);
}

void Tokenizer::save(const std::filesystem::path& path) const {
  write_file_atomically(path, serialized_);
}

}  // namespace tessera::data
