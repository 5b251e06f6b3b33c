#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/check.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {
std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
size_t entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST(AtomicFile, ReplacesWholeOrNotAtAll) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_atomic_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path target = dir / "file.txt";
  write_file_atomically(target, "old");
  EXPECT_EQ(read(target), "old");
  {
    AtomicFile f(target);
    f.write("partial new content");
    EXPECT_EQ(read(target), "old") << "nothing is visible before commit";
    EXPECT_EQ(entries(dir), 2u);  // the target and the hidden temporary file
  }
  EXPECT_EQ(read(target), "old") << "an uncommitted write leaves the old file";
  EXPECT_EQ(entries(dir), 1u) << "and removes its temporary file";
  {
    AtomicFile f(target);
    f.write("new ");
    f.write("content");
    f.commit();
    EXPECT_THROW(f.write("more"), Error);
  }
  EXPECT_EQ(read(target), "new content");
  EXPECT_EQ(entries(dir), 1u);
  EXPECT_THROW(AtomicFile(dir / "missing" / "x"), Error);
  fs::remove_all(dir);
}

// Files are created as any new file would be under the process's umask, not private to the owner.
TEST(AtomicFile, HonoursTheUmask) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_umask_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    const mode_t old = ::umask(mask);
    write_file_atomically(dir / "f", "x");
    ::umask(old);
    const auto perms = static_cast<mode_t>(fs::status(dir / "f").permissions());
    EXPECT_EQ(perms, 0666 & ~mask) << "umask " << std::oct << mask;
  }
  fs::remove_all(dir);
}
