// AES-256-GCM sealing and the key file format.
#include "idemproxy/store/sealer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

using namespace idemproxy::store;

namespace {

SealingKey key(const std::string& id, unsigned char fill) {
  SealingKey k;
  k.id = id;
  k.bytes.fill(fill);
  return k;
}

std::string write_file(const std::string& text) {
  char name[] = "/tmp/idemproxy-keys-XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  ::close(fd);
  std::ofstream(name) << text;
  return name;
}

const std::string kHex(64, 'a');

}  // namespace

TEST(Sealer, SealedValuesOpenUnderTheSameContextOnly) {
  const Sealer s({key("k1", 1)});
  const std::string card = "{\"card\":\"4242424242424242\"}";
  const auto sealed = s.seal(card, "scope/key/body");
  EXPECT_EQ(sealed.find("4242"), std::string::npos);
  EXPECT_EQ(sealed.size(), card.size() + 12 + 16);
  EXPECT_EQ(s.open("k1", sealed, "scope/key/body").value(), card);
  EXPECT_FALSE(s.open("k1", sealed, "scope/other/body").has_value());
}

TEST(Sealer, EverySealUsesAFreshNonce) {
  const Sealer s({key("k1", 1)});
  EXPECT_NE(s.seal("same", "c"), s.seal("same", "c"));
}

TEST(Sealer, AlteredCiphertextOrTagDoesNotOpen) {
  const Sealer s({key("k1", 1)});
  const auto sealed = s.seal("a response body", "c");
  for (std::size_t i = 0; i < sealed.size(); ++i) {
    auto altered = sealed;
    altered[i] = static_cast<char>(altered[i] ^ 0x01);
    EXPECT_FALSE(s.open("k1", altered, "c").has_value()) << "byte " << i;
  }
  EXPECT_FALSE(s.open("k1", sealed.substr(0, 20), "c").has_value());
  EXPECT_FALSE(s.open("k1", "", "c").has_value());
}

TEST(Sealer, RotationSealsWithTheFirstKeyAndOpensWithAny) {
  const Sealer old_ring({key("2026-05", 5)});
  const auto old_sealed = old_ring.seal("old", "c");
  const Sealer ring({key("2026-11", 11), key("2026-05", 5)});
  EXPECT_EQ(ring.current_id(), "2026-11");
  EXPECT_EQ(ring.open("2026-05", old_sealed, "c").value(), "old");
  const auto new_sealed = ring.seal("new", "c");
  EXPECT_EQ(ring.open("2026-11", new_sealed, "c").value(), "new");
  EXPECT_FALSE(old_ring.open("2026-11", new_sealed, "c").has_value());  // unknown key id
  EXPECT_FALSE(ring.open("2026-11", old_sealed, "c").has_value());      // wrong key
}

TEST(Sealer, EmptyPlaintextSealsAndOpens) {
  const Sealer s({key("k1", 1)});
  EXPECT_EQ(s.open("k1", s.seal("", "c"), "c").value(), "");
}

TEST(KeyFile, ReadsKeysNewestFirstSkippingCommentsAndBlankLines) {
  const auto path = write_file("# rotated 2026-11\n\n2026-11: " + std::string(64, 'F') +
                               "\n  2026-05:" + std::string(64, '0') + "  \n");
  const auto keys = read_key_file(path);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0].id, "2026-11");
  EXPECT_EQ(keys[0].bytes[0], 0xff);
  EXPECT_EQ(keys[1].id, "2026-05");
  EXPECT_EQ(keys[1].bytes[31], 0x00);
  std::remove(path.c_str());
}

TEST(KeyFile, BadFilesNameTheLineAndTheProblem) {
  struct Case {
    std::string text;
    std::string expected;
  };
  const Case cases[] = {
      {"k1 " + kHex + "\n", "line 1: expected ID:HEX"},
      {"# c\nk1:" + kHex.substr(2) + "\n", "line 2: the key must be 64 hex digits"},
      {"k1:" + std::string(63, 'a') + "g\n", "line 1: the key is not hexadecimal"},
      {"bad id:" + kHex + "\n", "line 1: the key id must be"},
      {":" + kHex + "\n", "line 1: the key id must be"},
      {"k1:" + kHex + "\nk1:" + kHex + "\n", "key id \"k1\" repeats"},
      {"# only a comment\n", "holds no key"},
  };
  for (const auto& c : cases) {
    const auto path = write_file(c.text);
    try {
      read_key_file(path);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
          << e.what() << " (expected " << c.expected << ")";
    }
    std::remove(path.c_str());
  }
  EXPECT_THROW(read_key_file("/nonexistent/keys"), std::invalid_argument);
}
