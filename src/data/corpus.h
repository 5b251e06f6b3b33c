#pragma once
// A corpus is a list of UTF-8 text documents. It comes from a text file, a folder of text files
// (each file one document, read in sorted path order so the result does not depend on the
// filesystem), or the King James Bible printed by the `bible` program of Debian's bible-kjv.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

struct Document {
  std::string name;  // file path, or "kjv"
  std::string text;  // valid UTF-8
};

struct Corpus {
  std::string source;  // what was read, for data.json and messages
  std::vector<Document> documents;

  int64_t bytes() const;
};

// Reads a text file, or every regular file under a folder (recursively; names starting with '.'
// are skipped). Throws on a missing path, invalid UTF-8 (naming the file and byte offset) and an
// empty corpus (no text at all, or only whitespace).
Corpus read_text_corpus(const std::filesystem::path& path);

// Runs `<program> -f Gen1:1-Rev22:21` and keeps the verse text, one verse per line. Throws with a
// message naming the bible-kjv package when the program is missing or fails.
Corpus read_kjv_corpus(const std::string& program = "bible");

// The `bible` program prints "Ge1:1 In the beginning ..." — one verse per line, led by a
// reference (book abbreviation, chapter:verse). Returns the text with the references removed;
// throws if a non-empty line has no reference, so a changed output format is noticed.
std::string strip_verse_references(std::string_view bible_output);

// Throws if `text` is not valid UTF-8, naming `what` and the offset of the first bad byte.
void check_utf8(std::string_view text, std::string_view what);

// Offset of the first byte that is not part of valid UTF-8 (overlong forms, surrogates and code
// points above U+10FFFF are invalid), or text.size() when all of it is valid.
size_t first_invalid_utf8(std::string_view text);

// Throws if the corpus holds no text (no documents, or only whitespace).
void check_not_empty(const Corpus& corpus);

}  // namespace tessera::data
