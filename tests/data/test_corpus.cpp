// Corpus reading: files, folders, UTF-8 checks, empty corpora, and the KJV's verse references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "data/corpus.h"
#include "test_util.h"

namespace tessera::data {
namespace {

using testing::ScratchDir;
using testing::write_bytes;

TEST(Corpus, Utf8ValidatorAcceptsTextAndFindsTheFirstBadByte) {
  EXPECT_EQ(first_invalid_utf8("plain ascii\n\t"), 13u);
  const std::string good = "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80";  // café 日本 😀
  EXPECT_EQ(first_invalid_utf8(good), good.size());
  EXPECT_EQ(first_invalid_utf8("ab\xFF" "cd"), 2u);             // never valid
  EXPECT_EQ(first_invalid_utf8("a\x80"), 1u);                   // lone continuation byte
  EXPECT_EQ(first_invalid_utf8("a\xC3"), 1u);                   // truncated sequence
  EXPECT_EQ(first_invalid_utf8("\xC0\xAF"), 0u);                // overlong '/'
  EXPECT_EQ(first_invalid_utf8("x\xED\xA0\x80"), 1u);           // surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("xy\xF4\x90\x80\x80"), 2u);      // above U+10FFFF
  EXPECT_EQ(first_invalid_utf8(std::string("a\0b", 3)), 3u);    // NUL is a valid character
}

TEST(Corpus, ReadsAFileAndAFolderInSortedOrderSkippingHiddenFiles) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "books/sub");
  write_bytes(dir / "books/b.txt", "second\n");
  write_bytes(dir / "books/a.txt", "first\n");
  write_bytes(dir / "books/sub/c.txt", "third\n");
  write_bytes(dir / "books/.hidden", "\xFF not text");
  std::filesystem::create_directories(dir / "books/.git");
  write_bytes(dir / "books/.git/objects", "\xFF binary");

  const Corpus folder = read_text_corpus(dir / "books");
  ASSERT_EQ(folder.documents.size(), 3u);
  EXPECT_EQ(folder.documents[0].text, "first\n");
  EXPECT_EQ(folder.documents[1].text, "second\n");
  EXPECT_EQ(folder.documents[2].text, "third\n");
  EXPECT_EQ(folder.bytes(), 6 + 7 + 6);

  const Corpus file = read_text_corpus(dir / "books/b.txt");
  ASSERT_EQ(file.documents.size(), 1u);
  EXPECT_EQ(file.documents[0].text, "second\n");
}

TEST(Corpus, EmptyCorpusIsAClearError) {
  ScratchDir dir;
  write_bytes(dir / "empty.txt", "");
  EXPECT_ERROR_WITH(read_text_corpus(dir / "empty.txt"), "empty.txt", "is empty");
  write_bytes(dir / "blank.txt", "  \n\t\n");
  EXPECT_ERROR_WITH(read_text_corpus(dir / "blank.txt"), "is empty", "whitespace");
  std::filesystem::create_directories(dir / "nothing");
  EXPECT_ERROR_WITH(read_text_corpus(dir / "nothing"), "is empty", "0 document(s)");
}

TEST(Corpus, MissingPathAndInvalidUtf8AreClearErrors) {
  ScratchDir dir;
  EXPECT_ERROR_WITH(read_text_corpus(dir / "no_such_file.txt"), "no_such_file.txt", "does not exist");
  write_bytes(dir / "latin1.txt", "caf\xE9 au lait\n");
  EXPECT_ERROR_WITH(read_text_corpus(dir / "latin1.txt"), "latin1.txt", "not valid UTF-8", "offset 3", "0xE9");
}

TEST(Corpus, StripsVerseReferences) {
  const std::string out =
      "Ge1:1 In the beginning God created the heaven and the earth.\n"
      "1Sam3:10 And the LORD came, and stood.\n"
      "SSol2:1 I am the rose of Sharon.\n"
      "\n"
      "Rev22:21 The grace of our Lord Jesus Christ be with you all. Amen.\n";
  EXPECT_EQ(strip_verse_references(out),
            "In the beginning God created the heaven and the earth.\n"
            "And the LORD came, and stood.\n"
            "I am the rose of Sharon.\n"
            "The grace of our Lord Jesus Christ be with you all. Amen.\n");
  EXPECT_ERROR_WITH(strip_verse_references("Ge1:1 fine\nno reference here\n"), "line 2", "verse reference");
  EXPECT_ERROR_WITH(strip_verse_references("Ge1: text\n"), "line 1");
}

TEST(Corpus, MissingBibleProgramNamesThePackage) {
  EXPECT_ERROR_WITH(read_kjv_corpus("tessera-no-such-bible-program"), "tessera-no-such-bible-program", "bible-kjv");
}

// The real King James Bible, where Debian's bible-kjv is installed (scripts/install-deps.sh
// installs it); skipped elsewhere so the suite passes without it.
TEST(Corpus, KingJamesBibleWhenInstalled) {
  if (std::system("command -v bible >/dev/null 2>&1") != 0) GTEST_SKIP() << "the bible program (bible-kjv) is absent";
  const Corpus kjv = read_kjv_corpus();
  ASSERT_EQ(kjv.documents.size(), 1u);
  const std::string& text = kjv.documents[0].text;
  EXPECT_EQ(text.rfind("In the beginning God created the heaven and the earth.\n", 0), 0u);
  EXPECT_NE(text.find("The grace of our Lord Jesus Christ be with you all. Amen.\n"), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 31102);  // the KJV's verse count
  EXPECT_EQ(text.find("Ge1:1"), std::string::npos);
  EXPECT_GT(kjv.bytes(), 4'000'000);
}

}  // namespace
}  // namespace tessera::data
