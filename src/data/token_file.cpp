#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>
#include <vector>

#include "core/atomic_file.h"
#include "core/check.h"

namespace tessera::data {

static_assert(std::endian::native == std::endian::little, "token files are little-endian; so is every supported host");

int token_file_version_for_vocab(int64_t vocab_size) { return vocab_size <= 65536 ? 1 : 2; }

void write_token_file(const std::filesystem::path& path, std::span<const int32_t> tokens, int64_t vocab_size) {
  TS_CHECK(vocab_size > 0 && vocab_size <= std::numeric_limits<int32_t>::max(), "vocab size {} is out of range",
           vocab_size);
  TS_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
           "{} tokens do not fit one token file (the llm.c header counts at most 2^31-1); split the corpus", tokens.size());
  const int version = token_file_version_for_vocab(vocab_size);
  int32_t header[256] = {};
  header[0] = kTokenFileMagic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = static_cast<int32_t>(vocab_size);

  AtomicFile out(path);
  {
    out.write(header, sizeof header);
    // Converted in blocks so a huge corpus needs no second full-size buffer.
    constexpr size_t kBlock = 1 << 16;
    std::vector<unsigned char> block(kBlock * 4);
    for (size_t begin = 0; begin < tokens.size(); begin += kBlock) {
      const size_t n = std::min(kBlock, tokens.size() - begin);
      for (size_t i = 0; i < n; ++i) {
        const int32_t t = tokens[begin + i];
        TS_CHECK(t >= 0 && t < vocab_size, "token {} at position {} is outside the vocabulary [0, {})", t, begin + i,
                 vocab_size);
        if (version == 1) {
          const auto v = static_cast<uint16_t>(t);
          std::memcpy(block.data() + 2 * i, &v, 2);
        } else {
          const auto v = static_cast<uint32_t>(t);
          std::memcpy(block.data() + 4 * i, &v, 4);
        }
      }
      out.write(block.data(), n * (version == 1 ? 2 : 4));
    }
  }
  out.commit();
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::filesystem::path& path, int64_t vocab_size) {
  std::shared_ptr<TokenFile> file(new TokenFile());
  file->path_ = path;
  const std::string name = path.string();

  const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot open token file {}: {}; run `tessera data prepare` to make it", name, std::strerror(errno));
  struct stat st {};
  const int stat_rc = ::fstat(fd, &st);
  if (stat_rc != 0 || !S_ISREG(st.st_mode) || st.st_size < kTokenFileHeaderBytes) {
    const int stat_errno = errno;
    ::close(fd);
    TS_CHECK(stat_rc == 0, "cannot stat token file {}: {}", name, std::strerror(stat_errno));
    TS_CHECK(S_ISREG(st.st_mode), "token file {} is not a regular file; give the path of a .bin file", name);
    TS_FAIL("token file {} is truncated: {} bytes, less than its {}-byte header; prepare the data again", name,
            static_cast<int64_t>(st.st_size), kTokenFileHeaderBytes);
  }
  file->map_bytes_ = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, file->map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  TS_CHECK(map != MAP_FAILED, "cannot map token file {} ({} bytes): {}", name, file->map_bytes_,
           std::strerror(map_errno));
  file->map_ = map;
  file->check(static_cast<const unsigned char*>(map), file->map_bytes_, vocab_size);
  return file;
}

std::shared_ptr<const TokenFile> TokenFile::from_bytes(std::string bytes, const std::string& name, int64_t vocab_size) {
  std::shared_ptr<TokenFile> file(new TokenFile());
  file->path_ = name;
  file->owned_ = std::move(bytes);
  TS_CHECK(static_cast<int64_t>(file->owned_.size()) >= kTokenFileHeaderBytes,
           "token file {} is truncated: {} bytes, less than its {}-byte header; prepare the data again", name,
           file->owned_.size(), kTokenFileHeaderBytes);
  file->check(reinterpret_cast<const unsigned char*>(file->owned_.data()), file->owned_.size(), vocab_size);
  return file;
}

void TokenFile::check(const unsigned char* data, size_t bytes, int64_t vocab_size) {
  const std::string name = path_.string();
  int32_t header[256];
  std::memcpy(header, data, sizeof header);
  TS_CHECK(header[0] == kTokenFileMagic,
           "token file {} has bad magic {} (expected {}): it is not an llm.c/tessera token file, or it is corrupt",
           name, header[0], kTokenFileMagic);
  TS_CHECK(header[1] == 1 || header[1] == 2,
           "token file {} has unsupported version {}: known are 1 (uint16 tokens) and 2 (uint32 tokens)", name,
           header[1]);
  TS_CHECK(header[2] >= 0, "token file {} has a negative token count {}: the header is corrupt", name, header[2]);
  version_ = header[1];
  count_ = header[2];
  recorded_vocab_ = header[3];
  TS_CHECK(recorded_vocab_ >= 0, "token file {} records a negative vocabulary size {}: the header is corrupt", name,
           recorded_vocab_);
  const int64_t expected = kTokenFileHeaderBytes + count_ * token_bytes();
  TS_CHECK(static_cast<int64_t>(bytes) == expected,
           "token file {} is {} bytes but its header promises {} tokens of {} bytes ({} bytes in all): the file is {}; "
           "prepare the data again",
           name, bytes, count_, token_bytes(), expected,
           static_cast<int64_t>(bytes) < expected ? "truncated" : "longer than its header says (corrupt)");
  body_ = data + kTokenFileHeaderBytes;

  if (vocab_size > 0) {
    TS_CHECK(recorded_vocab_ <= vocab_size,
             "token file {} was made with a vocabulary of {} ids but the tokenizer/model has {}; use the tokenizer the "
             "file was prepared with", name, recorded_vocab_, vocab_size);
    std::vector<int32_t> block(1 << 16);
    for (int64_t begin = 0; begin < count_; begin += static_cast<int64_t>(block.size())) {
      const int64_t n = std::min<int64_t>(static_cast<int64_t>(block.size()), count_ - begin);
      read(begin, std::span<int32_t>(block.data(), static_cast<size_t>(n)));
      for (int64_t i = 0; i < n; ++i) {
        TS_CHECK(block[i] >= 0 && block[i] < vocab_size, "token file {} holds token {} at position {}, outside the vocabulary [0, {}); "
                 "the file is corrupt or was made with another tokenizer", name, block[i], begin + i, vocab_size);
      }
    }
  }
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

int32_t TokenFile::at(int64_t index) const {
  int32_t v = 0;
  read(index, std::span<int32_t>(&v, 1));
  return v;
}

void TokenFile::read(int64_t begin, std::span<int32_t> out) const {
  const auto n = static_cast<int64_t>(out.size());
  TS_CHECK(begin >= 0 && begin + n <= count_, "token range [{}, {}) is outside token file {} ({} tokens)", begin,
           begin + n, path_.string(), count_);
  if (version_ == 1) {
    const unsigned char* p = body_ + 2 * begin;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = v;
    }
  } else {
    const unsigned char* p = body_ + 4 * begin;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      // A uint32 token that does not fit int32 reads as negative; the vocab check at open names it.
      out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
  }
}

}  // namespace tessera::data
