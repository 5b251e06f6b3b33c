#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "io/safetensors.h"

using namespace tessera;
using namespace tessera::io;
namespace fs = std::filesystem;

namespace {

class SafeTensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "tessera-safetensors-XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with the given header text and data bytes; the length field says `header_len` when given.
  std::string raw_file(const std::string& name, const std::string& header, const std::string& data,
                       std::optional<uint64_t> header_len = std::nullopt) const {
    std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    uint64_t len = header_len.value_or(header.size());
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << data;
    return p;
  }

  static std::string read_bytes(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void write_bytes(const std::string& p, const std::string& bytes) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
  }

  // Opening must fail with a tessera::Error whose message names the file and contains `problem`.
  static void expect_open_error(const std::string& p, const std::string& problem) {
    try {
      SafeTensorsFile::open(p);
      ADD_FAILURE() << "opening " << p << " succeeded, expected an error containing '" << problem << "'";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(problem), std::string::npos) << "expected '" << problem << "' in: " << msg;
    }
  }

  std::string small_valid_file() {
    MemoryAccountant acc;
    SafeTensorsWriter w;
    Tensor a = Tensor::empty({2, 3}, DType::F32, MemoryTag::Workspace, acc);
    for (int i = 0; i < 6; ++i) a.data<float>()[i] = 0.5f * static_cast<float>(i);
    Tensor b = Tensor::empty({5}, DType::U8, MemoryTag::Workspace, acc);
    for (int i = 0; i < 5; ++i) b.data<uint8_t>()[i] = static_cast<uint8_t>(200 + i);
    w.add("a", a);
    w.add("b", b);
    w.set_metadata("step", "7");
    std::string p = path("small.safetensors");
    w.write(p);
    return p;
  }

  fs::path dir_;
};

std::string entry_json(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                       uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

}  // namespace

TEST_F(SafeTensors, RoundTripsEveryDtypeShapeAndMetadata) {
  MemoryAccountant acc;
  SafeTensorsWriter w;
  Tensor f32 = Tensor::empty({3, 4}, DType::F32, MemoryTag::Workspace, acc);
  for (int i = 0; i < 12; ++i) f32.data<float>()[i] = static_cast<float>(i) * 1.25f - 3.0f;
  Tensor bf = Tensor::empty({5}, DType::BF16, MemoryTag::Workspace, acc);
  for (int i = 0; i < 5; ++i) bf.data<bf16>()[i] = to_bf16(static_cast<float>(i) + 0.5f);
  Tensor h = Tensor::empty({2, 1, 3}, DType::F16, MemoryTag::Workspace, acc);
  for (int i = 0; i < 6; ++i) h.data<f16>()[i] = to_f16(-static_cast<float>(i));
  Tensor i32 = Tensor::empty({7}, DType::I32, MemoryTag::Workspace, acc);
  for (int i = 0; i < 7; ++i) i32.data<int32_t>()[i] = -1000 * i;
  Tensor i8 = Tensor::empty({3}, DType::I8, MemoryTag::Workspace, acc);
  for (int i = 0; i < 3; ++i) i8.data<int8_t>()[i] = static_cast<int8_t>(-100 + i);
  Tensor scalar = Tensor::empty({}, DType::F32, MemoryTag::Workspace, acc);
  scalar.data<float>()[0] = 42.0f;
  Tensor empty = Tensor::empty({0, 3}, DType::F32, MemoryTag::Workspace, acc);

  // Odd-sized tensors first: the writer must reorder them so the f32 ones stay aligned.
  w.add("odd.i8", i8);
  w.add("half", h);
  w.add("weights.f32", f32);
  w.add("bf", bf);
  w.add("ids", i32);
  w.add("scalar", scalar);
  w.add("empty", empty);
  w.set_metadata("arch", "gpt2");
  w.set_metadata("note", "ünïcode ok");
  std::string p = path("round.safetensors");
  w.write(p);

  std::string bytes = read_bytes(p);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u) << "data buffer must start 8-byte aligned";

  SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.names().size(), 7u);
  EXPECT_TRUE(f.has("bf"));
  EXPECT_FALSE(f.has("nope"));
  EXPECT_EQ(f.metadata().at("arch"), "gpt2");
  EXPECT_EQ(f.metadata_value("note"), "ünïcode ok");

  auto same_bytes = [&](const std::string& name, const Tensor& t) {
    const SafeTensorEntry& e = f.entry(name);
    EXPECT_EQ(e.dtype, t.dtype()) << name;
    EXPECT_EQ(e.shape, t.shape()) << name;
    ASSERT_EQ(e.bytes, t.nbytes()) << name;
    EXPECT_EQ(std::memcmp(e.data, t.raw(), e.bytes), 0) << name;
    Tensor v = f.view(name, t.dtype());  // every tensor is aligned, so every view works
    EXPECT_EQ(v.shape(), t.shape());
  };
  same_bytes("weights.f32", f32);
  same_bytes("bf", bf);
  same_bytes("half", h);
  same_bytes("ids", i32);
  same_bytes("odd.i8", i8);
  same_bytes("scalar", scalar);
  same_bytes("empty", empty);
  EXPECT_EQ(f.view("scalar", DType::F32).data<float>()[0], 42.0f);
  EXPECT_EQ(f.view("ids", DType::I32).data<int32_t>()[6], -6000);
}

TEST_F(SafeTensors, WriterKeepsAddedTensorsAlive) {
  MemoryAccountant acc;
  SafeTensorsWriter w;
  {
    Tensor t = Tensor::empty({4}, DType::I32, MemoryTag::Workspace, acc);
    for (int i = 0; i < 4; ++i) t.data<int32_t>()[i] = i * i + 1;
    w.add("t", t);
  }
  std::string p = path("alive.safetensors");
  w.write(p);
  SafeTensorsFile f = SafeTensorsFile::open(p);
  Tensor v = f.view("t", DType::I32);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(v.data<int32_t>()[i], i * i + 1);
}

// Deferred items: the file is the one eager items give, byte for byte (the same order by element
// size, the same header), and each producer's bytes are gone before the next producer runs.
TEST_F(SafeTensors, DeferredItemsWriteTheEagerFileOneItemAtATime) {
  MemoryAccountant acc;
  struct Source {
    std::string name;
    DType dtype;
    Shape shape;
  };
  // Mixed element sizes and an empty tensor, so that the data order differs from the order added.
  const std::vector<Source> sources = {{"small.i8", DType::I8, {5}},      {"w", DType::F32, {3, 4}},
                                       {"half", DType::BF16, {7}},         {"ids", DType::I32, {2, 2}},
                                       {"empty", DType::F32, {0}},         {"bias", DType::F32, {4}}};
  std::vector<Tensor> values;
  for (size_t i = 0; i < sources.size(); ++i) {
    Tensor t = Tensor::empty(sources[i].shape, sources[i].dtype, MemoryTag::Workspace, acc);
    auto* bytes = static_cast<uint8_t*>(t.raw());
    for (size_t b = 0; b < t.nbytes(); ++b) bytes[b] = static_cast<uint8_t>(31 * i + 7 * b + 1);
    values.push_back(t);
  }
  SafeTensorsWriter eager;
  for (size_t i = 0; i < sources.size(); ++i) eager.add(sources[i].name, values[i]);
  eager.set_metadata("format", "test");
  eager.write(path("eager.safetensors"));

  MemoryAccountant produced;  // only the producers' outputs
  int live = 0, most_live = 0;
  std::vector<std::string> called;
  SafeTensorsWriter deferred;
  for (size_t i = 0; i < sources.size(); ++i) {
    const Source& s = sources[i];
    deferred.add(s.name, s.dtype, s.shape, values[i].nbytes(), [&, i] {
      // Every earlier output was released: nothing the producers made is alive.
      live = produced.stats().live_total == 0 ? 1 : live + 1;
      most_live = std::max(most_live, live);
      called.push_back(sources[i].name);
      Tensor out = Tensor::empty(sources[i].shape, sources[i].dtype, MemoryTag::Comm, produced);
      if (out.nbytes() > 0) std::memcpy(out.raw(), values[i].raw(), out.nbytes());
      return out;
    });
  }
  deferred.set_metadata("format", "test");
  EXPECT_TRUE(called.empty()) << "producers run only when the file is written";
  deferred.write(path("deferred.safetensors"));

  EXPECT_EQ(read_bytes(path("deferred.safetensors")), read_bytes(path("eager.safetensors")));
  EXPECT_EQ(most_live, 1);
  EXPECT_EQ(produced.stats().live_total, 0u);
  EXPECT_EQ(produced.stats().peak_total, 48u) << "one item at a time: the largest, w";
  // Called once each, in the order of the file's data.
  EXPECT_EQ(called, SafeTensorsFile::open(path("deferred.safetensors")).names());
}

TEST_F(SafeTensors, ADeferredItemsProducerMustMakeTheItemItAnnounced) {
  MemoryAccountant acc;
  const auto write_with = [&](std::function<Tensor()> produce) {
    SafeTensorsWriter w;
    w.add("x", DType::F32, {2, 3}, 24, std::move(produce));
    w.write(path("bad.safetensors"));
  };
  EXPECT_THROW(write_with([&] { return Tensor::zeros({2, 3}, DType::I32, MemoryTag::Workspace, acc); }), Error);
  EXPECT_THROW(write_with([&] { return Tensor::zeros({5}, DType::F32, MemoryTag::Workspace, acc); }), Error);
  EXPECT_THROW(write_with([] { return Tensor(); }), Error);
  EXPECT_THROW(write_with([&] { return Tensor::zeros({3, 2}, DType::F32, MemoryTag::Workspace, acc).transpose(0, 1); }),
               Error);
  EXPECT_FALSE(fs::exists(path("bad.safetensors"))) << "a failed write leaves no file";
  SafeTensorsWriter w;
  EXPECT_THROW(w.add("y", DType::F32, {2, 3}, 20, [&] { return Tensor(); }), Error);  // wrong byte count
  EXPECT_THROW(w.add("z", DType::F32, {2, 3}, 24, nullptr), Error);                  // no producer
  EXPECT_EQ(w.size(), 0u);
}

TEST_F(SafeTensors, CopyToChecksShapeAndDtype) {
  std::string p = small_valid_file();
  SafeTensorsFile f = SafeTensorsFile::open(p);
  MemoryAccountant acc;
  Tensor dst = Tensor::zeros({2, 3}, DType::F32, MemoryTag::Workspace, acc);
  f.copy_to("a", dst);
  EXPECT_EQ(dst.data<float>()[5], 2.5f);
  Tensor wrong_shape = Tensor::zeros({3, 2}, DType::F32, MemoryTag::Workspace, acc);
  EXPECT_THROW(f.copy_to("a", wrong_shape), Error);
  Tensor wrong_dtype = Tensor::zeros({2, 3}, DType::I32, MemoryTag::Workspace, acc);
  EXPECT_THROW(f.copy_to("a", wrong_dtype), Error);
  EXPECT_THROW(f.view("a", DType::BF16), Error);
  EXPECT_THROW(f.entry("missing"), Error);
  EXPECT_THROW(f.metadata_value("missing"), Error);
}

TEST_F(SafeTensors, ViewsAreCopyOnWrite) {
  std::string p = small_valid_file();
  std::string before = read_bytes(p);
  {
    SafeTensorsFile f = SafeTensorsFile::open(p);
    Tensor v = f.view("a", DType::F32);
    v.data<float>()[0] = -99.0f;
    EXPECT_EQ(f.view("a", DType::F32).data<float>()[0], -99.0f);
  }
  EXPECT_EQ(read_bytes(p), before);
}

TEST_F(SafeTensors, WriteReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  std::string p = small_valid_file();
  SafeTensorsWriter w;
  std::vector<int32_t> values = {9, 8, 7};
  w.add("c", DType::I32, {3}, values.data(), values.size() * sizeof(int32_t));
  w.write(p);
  SafeTensorsFile f = SafeTensorsFile::open(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"c"});
  EXPECT_TRUE(f.metadata().empty());
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "small.safetensors");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(SafeTensors, WriterRejectsBadInput) {
  MemoryAccountant acc;
  SafeTensorsWriter w;
  std::vector<float> v(6, 1.0f);
  w.add("x", DType::F32, {2, 3}, v.data(), 24);
  EXPECT_THROW(w.add("x", DType::F32, {2, 3}, v.data(), 24), Error);             // duplicate
  EXPECT_THROW(w.add("__metadata__", DType::F32, {6}, v.data(), 24), Error);     // reserved
  EXPECT_THROW(w.add("", DType::F32, {6}, v.data(), 24), Error);                 // empty name
  EXPECT_THROW(w.add("y", DType::F32, {2, 3}, v.data(), 20), Error);             // wrong byte count
  Tensor t = Tensor::zeros({2, 3}, DType::F32, MemoryTag::Workspace, acc);
  EXPECT_THROW(w.add("z", t.transpose(0, 1)), Error);                           // not contiguous
  EXPECT_EQ(w.size(), 1u);
  EXPECT_THROW(w.write(path("no/such/folder/x.safetensors")), Error);
}

TEST_F(SafeTensors, MissingFileOrFolder) {
  expect_open_error(path("absent.safetensors"), "cannot open");
  expect_open_error(dir_.string(), "not a regular file");
}

TEST_F(SafeTensors, BytesInMemoryGetTheSameChecksAsAFile) {
  const std::string bytes = read_bytes(small_valid_file());
  SafeTensorsFile f = SafeTensorsFile::from_bytes(std::vector<char>(bytes.begin(), bytes.end()), "memory.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(f.metadata_value("step"), "7");
  SafeTensorsFile moved = std::move(f);  // the bytes move with it
  MemoryAccountant acc;
  Tensor a = Tensor::empty({2, 3}, DType::F32, MemoryTag::Workspace, acc);
  moved.copy_to("a", a);
  EXPECT_EQ(a.data<float>()[5], 2.5f);
  try {
    SafeTensorsFile::from_bytes(std::vector<char>(bytes.begin(), bytes.end() - 1), "memory.safetensors");
    ADD_FAILURE() << "a truncated buffer was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory.safetensors"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SafeTensorsFile::from_bytes({}, "memory.safetensors"), Error);
}

TEST_F(SafeTensors, EmptyAndTinyFiles) {
  write_bytes(path("empty"), "");
  expect_open_error(path("empty"), "too short");
  write_bytes(path("five"), "\x05\x00\x00\x00\x00");
  expect_open_error(path("five"), "too short");
}

TEST_F(SafeTensors, HeaderLengthLargerThanFile) {
  expect_open_error(raw_file("long", "{}", "", 1000), "runs past the end");
}

TEST_F(SafeTensors, HeaderLengthAbsurd) {
  expect_open_error(raw_file("huge", "{}", "", uint64_t{1} << 62), "absurdly large");
  expect_open_error(raw_file("max", "{}", "", ~uint64_t{0}), "absurdly large");
}

TEST_F(SafeTensors, InvalidJson) {
  expect_open_error(raw_file("bad", "{\"a\": [1, 2", ""), "not valid JSON");
  expect_open_error(raw_file("garbage", "\xff\xfe\x00junk", ""), "not valid JSON");
  expect_open_error(raw_file("array", "[1,2,3]", ""), "expected an object");
}

TEST_F(SafeTensors, DeeplyNestedJsonFailsCleanly) {
  std::string nested = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  expect_open_error(raw_file("nested", nested, ""), "nests JSON more than 64 levels");
  // Where an error message would print the value (metadata must be strings).
  nested = "{\"__metadata__\":{\"k\":" + std::string(200000, '[') + std::string(200000, ']') + "}}";
  expect_open_error(raw_file("nested_meta", nested, ""), "nests JSON");
}

TEST_F(SafeTensors, OffsetsOutsideTheBuffer) {
  std::string data(16, '\0');
  expect_open_error(raw_file("out", "{" + entry_json("a", "F32", "[8]", 0, 32) + "}", data), "outside the data buffer");
}

TEST_F(SafeTensors, OffsetsOverlapping) {
  std::string data(24, '\0');
  std::string h = "{" + entry_json("a", "F32", "[4]", 0, 16) + "," + entry_json("b", "F32", "[4]", 8, 24) + "}";
  expect_open_error(raw_file("overlap", h, data), "overlaps tensor 'a'");
}

TEST_F(SafeTensors, OffsetsWithAHole) {
  std::string data(24, '\0');
  std::string h = "{" + entry_json("a", "F32", "[2]", 0, 8) + "," + entry_json("b", "F32", "[4]", 8 + 0, 24) + "}";
  EXPECT_NO_THROW(SafeTensorsFile::open(raw_file("ok", h, data)));  // the control: tiles exactly
  h = "{" + entry_json("a", "F32", "[2]", 0, 8) + "," + entry_json("b", "F32", "[3]", 12, 24) + "}";
  expect_open_error(raw_file("hole", h, data), "no holes");
}

TEST_F(SafeTensors, OffsetsReversed) {
  std::string data(16, '\0');
  expect_open_error(raw_file("rev", "{" + entry_json("a", "F32", "[4]", 16, 0) + "}", data), "end before they begin");
}

TEST_F(SafeTensors, TrailingBytesBelongToNoTensor) {
  std::string data(20, '\0');
  expect_open_error(raw_file("trail", "{" + entry_json("a", "F32", "[4]", 0, 16) + "}", data), "belongs to no tensor");
}

TEST_F(SafeTensors, ShapeDoesNotMatchByteRange) {
  std::string data(16, '\0');
  expect_open_error(raw_file("size", "{" + entry_json("a", "F32", "[3]", 0, 16) + "}", data), "span 16 bytes");
  expect_open_error(raw_file("size16", "{" + entry_json("a", "BF16", "[4]", 0, 16) + "}", data), "span 16 bytes");
}

TEST_F(SafeTensors, ShapeOverflow) {
  std::string h = "{" + entry_json("a", "F32", "[4294967296,4294967296,16]", 0, 0) + "}";
  expect_open_error(raw_file("ovf", h, ""), "overflows");
  h = "{" + entry_json("a", "F32", "[18446744073709551615]", 0, 0) + "}";
  expect_open_error(raw_file("ovf2", h, ""), "overflows");
  // No element, yet no tensor can have this shape's strides: viewing it overflowed (found reviewing
  // the fuzz targets; tests/fuzz/corpus/fuzz_safetensors/regression_empty_shape_stride_overflow.safetensors).
  h = "{" + entry_json("a", "F32", "[0,4611686018427387904,4611686018427387904]", 0, 0) + "}";
  expect_open_error(raw_file("ovf3", h, ""), "overflows");
}

TEST_F(SafeTensors, UnknownAndUnsupportedDtypes) {
  std::string data(16, '\0');
  expect_open_error(raw_file("q7", "{" + entry_json("a", "Q7", "[4]", 0, 16) + "}", data), "unknown dtype 'Q7'");
  expect_open_error(raw_file("f64", "{" + entry_json("a", "F64", "[2]", 0, 16) + "}", data), "does not support");
}

TEST_F(SafeTensors, MalformedEntries) {
  std::string data(16, '\0');
  expect_open_error(raw_file("neg", "{" + entry_json("a", "F32", "[-4]", 0, 16) + "}", data), "non-negative integer");
  expect_open_error(raw_file("float", "{" + entry_json("a", "F32", "[4.0]", 0, 16) + "}", data), "non-negative integer");
  expect_open_error(raw_file("noshape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", data), "lacks one of");
  expect_open_error(raw_file("extra", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16],\"x\":1}}", data),
                    "unknown field 'x'");
  expect_open_error(raw_file("offs", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", data),
                    "expected [begin, end]");
  expect_open_error(raw_file("num", "{\"a\":5}", data), "expected an object");
  expect_open_error(raw_file("meta", "{\"__metadata__\":{\"k\":1}}", ""), "expected a string");
}

TEST_F(SafeTensors, EveryTruncationFailsCleanly) {
  std::string p = small_valid_file();
  std::string bytes = read_bytes(p);
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string q = path("cut");
    write_bytes(q, bytes.substr(0, n));
    EXPECT_THROW(SafeTensorsFile::open(q), Error) << "prefix of " << n << " bytes opened";
  }
}

TEST_F(SafeTensors, FlippedBytesNeverCrash) {
  std::string p = small_valid_file();
  std::string bytes = read_bytes(p);
  int opened = 0, rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char bit : {0x01, 0x10, 0x80}) {
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ bit);
      std::string q = path("flip");
      write_bytes(q, flipped);
      try {
        SafeTensorsFile f = SafeTensorsFile::open(q);
        for (const std::string& name : f.names()) (void)f.entry(name);  // touch what it accepted
        ++opened;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  // Flips inside the data buffer leave a valid file; flips in the length or structure do not.
  EXPECT_GT(opened, 0);
  EXPECT_GT(rejected, 0);
}

// A model of many thousand layers has as many tensors: writing and opening stay linear in their
// count (a name check that scanned every earlier tensor, and the JSON parser's nesting callback,
// each made 240 000 tensors take many minutes). 200 000 here take about a second either way.
TEST_F(SafeTensors, ManyTensorsWriteAndOpenInLinearTime) {
  constexpr int kTensors = 200000;
  std::vector<float> values(kTensors);
  const auto t0 = std::chrono::steady_clock::now();
  SafeTensorsWriter w;
  for (int i = 0; i < kTensors; ++i) {
    values[static_cast<size_t>(i)] = static_cast<float>(i);
    w.add("blocks." + std::to_string(i) + ".w", DType::F32, {1}, &values[static_cast<size_t>(i)], sizeof(float));
  }
  w.write(path("many.safetensors"));
  SafeTensorsFile f = SafeTensorsFile::open(path("many.safetensors"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(f.has("blocks.199999.w"));
  EXPECT_LT(seconds, 30.0);
}
