#include "data/corpus.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>

#include "core/check.h"

namespace tessera::data {

namespace fs = std::filesystem;

int64_t Corpus::bytes() const {
  int64_t total = 0;
  for (const Document& d : documents) total += static_cast<int64_t>(d.text.size());
  return total;
}

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    uint32_t min_cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min_cp = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min_cp = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min_cp = 0x10000;
    } else {
      return i;  // a continuation byte without a lead, or 0xF8..0xFF
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return n;
}

void check_utf8(std::string_view text, std::string_view what) {
  const size_t bad = first_invalid_utf8(text);
  TS_CHECK(bad == text.size(),
           "{} is not valid UTF-8: the byte 0x{:02X} at offset {} does not start a valid character; "
           "convert the text to UTF-8 (e.g. with iconv) or remove the file from the corpus",
           what, static_cast<unsigned>(static_cast<unsigned char>(text[bad])), bad);
}

void check_not_empty(const Corpus& corpus) {
  const bool any_text = std::any_of(corpus.documents.begin(), corpus.documents.end(), [](const Document& d) {
    return d.text.find_first_not_of(" \t\n\r\v\f") != std::string::npos;
  });
  TS_CHECK(any_text, "corpus {} is empty: {} document(s), {} bytes, and no text besides whitespace; "
           "give a file or folder with text in it", corpus.source, corpus.documents.size(), corpus.bytes());
}

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot open corpus file {} for reading", path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TS_CHECK(!in.bad(), "error while reading corpus file {}", path.string());
  return text;
}

bool hidden(const fs::path& relative) {
  for (const fs::path& part : relative) {
    const std::string name = part.string();
    if (!name.empty() && name[0] == '.') return true;
  }
  return false;
}

// The program's full path when it is on PATH (or is itself a path to an executable), else empty.
std::string find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path_env = std::getenv("PATH");
  std::string_view dirs = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
    const std::string candidate = fmt::format("{}/{}", dir.empty() ? std::string_view(".") : dir, program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

bool is_reference(std::string_view line, size_t* text_start) {
  size_t i = 0;
  auto digit = [&](size_t k) { return k < line.size() && line[k] >= '0' && line[k] <= '9'; };
  auto letter = [&](size_t k) {
    return k < line.size() && ((line[k] >= 'A' && line[k] <= 'Z') || (line[k] >= 'a' && line[k] <= 'z'));
  };
  if (digit(i)) ++i;  // "1Sam", "2Kin", "3John"
  if (!letter(i)) return false;
  while (letter(i)) ++i;
  if (!digit(i)) return false;
  while (digit(i)) ++i;
  if (i >= line.size() || line[i] != ':') return false;
  ++i;
  if (!digit(i)) return false;
  while (digit(i)) ++i;
  if (i < line.size() && line[i] == ' ') ++i;
  else if (i != line.size()) return false;
  *text_start = i;
  return true;
}

}  // namespace

Corpus read_text_corpus(const fs::path& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  TS_CHECK(!ec && fs::exists(status), "corpus path {} does not exist; give a UTF-8 text file, a folder of them, or 'kjv'",
           path.string());
  Corpus corpus;
  corpus.source = path.string();
  std::vector<fs::path> files;
  if (fs::is_directory(status)) {
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(path)) {
      if (entry.is_regular_file() && !hidden(fs::relative(entry.path(), path))) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    TS_CHECK(fs::is_regular_file(status), "corpus path {} is neither a regular file nor a folder", path.string());
    files.push_back(path);
  }
  for (const fs::path& file : files) {
    Document doc{file.string(), read_file(file)};
    check_utf8(doc.text, fmt::format("corpus file {}", file.string()));
    corpus.documents.push_back(std::move(doc));
  }
  check_not_empty(corpus);
  return corpus;
}

std::string strip_verse_references(std::string_view bible_output) {
  std::string text;
  text.reserve(bible_output.size());
  size_t line_number = 0;
  while (!bible_output.empty()) {
    ++line_number;
    const size_t end = bible_output.find('\n');
    std::string_view line = bible_output.substr(0, end);
    bible_output = end == std::string_view::npos ? std::string_view{} : bible_output.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    size_t start = 0;
    TS_CHECK(is_reference(line, &start),
             "line {} of the bible program's output does not start with a verse reference like 'Ge1:1': '{}'; "
             "the bible-kjv output format changed, or the program is not Debian's bible-kjv",
             line_number, line.substr(0, 60));
    text.append(line.substr(start));
    text.push_back('\n');
  }
  return text;
}

Corpus read_kjv_corpus(const std::string& program) {
  const std::string found = find_program(program);
  TS_CHECK(!found.empty(),
           "the '{}' program was not found on PATH: install Debian's bible-kjv package "
           "(scripts/install-deps.sh does, or: apt-get install bible-kjv), or pass a text file or folder as --input",
           program);
  // Only the program's path reaches the shell, single-quoted (with any quote in it escaped).
  std::string quoted;
  for (char c : found) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  const std::string command = fmt::format("'{}' -f Gen1:1-Rev22:21", quoted);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  TS_CHECK(pipe != nullptr, "could not run '{}' (bible-kjv)", command);
  std::string output;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = fread(buffer, 1, sizeof buffer, pipe.get())) > 0) output.append(buffer, got);
  const int status = pclose(pipe.release());
  TS_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "'{}' failed (exit status {}); check that Debian's bible-kjv package is installed and works", command,
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  Corpus corpus;
  corpus.source = "kjv (bible -f Gen1:1-Rev22:21, Debian bible-kjv)";
  corpus.documents.push_back(Document{"kjv", strip_verse_references(output)});
  check_utf8(corpus.documents.back().text, "the bible program's output");
  check_not_empty(corpus);
  return corpus;
}

}  // namespace tessera::data
