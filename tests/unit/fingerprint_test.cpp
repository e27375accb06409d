#include "idemproxy/engine/fingerprint.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

using namespace idemproxy::engine;

TEST(CanonicalJson, KeyOrderAndWhitespaceDoNotMatter) {
  EXPECT_EQ(canonical_json(R"({"b": 1, "a": [1, 2, {"d": null, "c": true}]})"),
            canonical_json(R"({"a":[1,2,{"c":true,"d":null}],"b":1})"));
  EXPECT_EQ(canonical_json(R"( { "b" : 1 , "a" : "x" } )"), R"({"a":"x","b":1})");
}

TEST(CanonicalJson, ValuesStillMatter) {
  EXPECT_NE(canonical_json(R"({"amount": 42})"), canonical_json(R"({"amount": 43})"));
  EXPECT_NE(canonical_json(R"([1, 2])"), canonical_json(R"([2, 1])"));  // arrays are ordered
}

TEST(CanonicalJson, InvalidJsonIsLeftAlone) { EXPECT_EQ(canonical_json("{not json"), "{not json"); }

TEST(Fingerprint, JsonBodiesAreCanonicalised) {
  EXPECT_EQ(fingerprint("POST", "/v1/orders", "application/json", R"({"a":1,"b":2})"),
            fingerprint("POST", "/v1/orders", "application/json; charset=utf-8",
                        "{ \"b\": 2,\n  \"a\": 1 }"));
  EXPECT_EQ(fingerprint("POST", "/x", "application/vnd.api+json", R"({"a":1,"b":2})"),
            fingerprint("POST", "/x", "application/vnd.api+json", R"({"b":2,"a":1})"));
}

TEST(Fingerprint, NonJsonBodiesAreComparedByteForByte) {
  EXPECT_NE(fingerprint("POST", "/x", "text/plain", R"({"a":1,"b":2})"),
            fingerprint("POST", "/x", "text/plain", R"({"b":2,"a":1})"));
}

TEST(Fingerprint, MethodPathAndQueryAreIncluded) {
  const auto base = fingerprint("POST", "/v1/orders?x=1", "", "body");
  EXPECT_NE(base, fingerprint("PATCH", "/v1/orders?x=1", "", "body"));
  EXPECT_NE(base, fingerprint("POST", "/v1/orders?x=2", "", "body"));
  EXPECT_NE(base, fingerprint("POST", "/v1/orders", "", "body"));
  EXPECT_NE(base, fingerprint("POST", "/v1/orders?x=1", "", "body2"));
  EXPECT_EQ(base.size(), 64u);  // hex SHA-256
}

TEST(Fingerprint, PartsCannotBeShiftedIntoEachOther) {
  EXPECT_NE(fingerprint("POST", "/ab", "", "c"), fingerprint("POST", "/a", "", "bc"));
}

TEST(Sha256Hex, MatchesKnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // The empty string, after "abc" on the same thread: the reused context starts over.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// Each I/O thread digests with a context of its own, reused: threads digesting at
// once get what one thread gets.
TEST(Sha256Hex, ThreadsDigestingAtOnceAgreeWithOneThread) {
  std::vector<std::string> inputs, expected;
  for (int i = 0; i < 200; ++i) {
    inputs.push_back("key-" + std::to_string(i) + std::string(static_cast<std::size_t>(i), 'x'));
    expected.push_back(sha256_hex(inputs.back()));
  }
  std::vector<std::vector<std::string>> got(4);
  std::vector<std::thread> threads;
  for (auto& out : got) {
    threads.emplace_back([&inputs, &out] {
      for (int round = 0; round < 20; ++round) {
        for (const auto& in : inputs) out.push_back(sha256_hex(in));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : got) {
    ASSERT_EQ(out.size(), inputs.size() * 20);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], expected[i % inputs.size()]);
  }
}

TEST(HmacSha256, MatchesRfc4231TestCase2) {
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

// The key's log hash (sha256_hex16) is sha256_hex's first 16 digits, held inline; an
// InlineString holds a whole value or nothing, and takes a view with no data.
TEST(KeyHash, IsTheDigestsFirstSixteenDigitsHeldInline) {
  const std::vector<std::string> keys = {"", "k", "order-2026-11-27-000000000001",
                                         std::string(300, 'x')};
  for (const auto& key : keys) {
    EXPECT_EQ(idemproxy::sha256_hex16(key).view(), idemproxy::sha256_hex(key).substr(0, 16));
  }
  idemproxy::InlineString<4> s;
  EXPECT_TRUE(s.empty());
  s.assign(std::string_view{});  // no data at all
  EXPECT_TRUE(s.empty());
  s.assign("abcd");
  EXPECT_EQ(s.view(), "abcd");
  s.assign("abcde");  // too long: not held, never cut short
  EXPECT_TRUE(s.empty());
}
