#include "idemproxy/engine/key.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

using idemproxy::engine::KeyError;
using idemproxy::engine::parse_key;

namespace {

std::string ok(std::string_view v) {
  auto r = parse_key(v);
  EXPECT_TRUE(std::holds_alternative<std::string>(r)) << "rejected: " << v;
  return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "";
}

bool rejected(std::string_view v) { return std::holds_alternative<KeyError>(parse_key(v)); }

}  // namespace

TEST(ParseKey, BareAndQuotedFormsMeanTheSameKey) {
  EXPECT_EQ(ok("abc"), "abc");
  EXPECT_EQ(ok("\"abc\""), "abc");
  EXPECT_EQ(ok("8e03978e-40d5-43e8-bc93-6894a57f9324"), "8e03978e-40d5-43e8-bc93-6894a57f9324");
}

TEST(ParseKey, QuotedStringUnescapesQuoteAndBackslash) {
  EXPECT_EQ(ok(R"("a\"b")"), "a\"b");
  EXPECT_EQ(ok(R"("a\\b")"), "a\\b");
  EXPECT_TRUE(rejected(R"("a\nb")"));  // only \" and \\ are escapes in RFC 8941
}

TEST(ParseKey, MalformedQuotedStringsAreRejected) {
  EXPECT_TRUE(rejected("\"abc"));
  EXPECT_TRUE(rejected("\"abc\"x"));
  EXPECT_TRUE(rejected("\"abc\\"));
}

TEST(ParseKey, EmptyKeysAreRejected) {
  EXPECT_TRUE(rejected(""));
  EXPECT_TRUE(rejected("\"\""));
}

TEST(ParseKey, LengthLimitIs255) {
  EXPECT_EQ(ok(std::string(255, 'k')).size(), 255u);
  EXPECT_TRUE(rejected(std::string(256, 'k')));
  EXPECT_TRUE(rejected("\"" + std::string(256, 'k') + "\""));
}

TEST(ParseKey, NonPrintableAsciiIsRejected) {
  EXPECT_TRUE(
      rejected("ab\x01"
               "c"));
  EXPECT_TRUE(rejected("ab\x7f"));
  EXPECT_TRUE(rejected("caf\xc3\xa9"));
  EXPECT_TRUE(rejected("\"caf\xc3\xa9\""));
  EXPECT_EQ(ok("a b"), "a b");  // space is printable
}

// Issue 10, 9: a header-scoped route must not reach a certificate or HMAC scope.
TEST(HeaderScope, NoHeaderValueNamesAVerifiedScopeAndNoTwoValuesCollide) {
  using idemproxy::engine::header_scope;
  EXPECT_EQ(header_scope("tenant-7"), "tenant-7");  // unchanged: stored records still match
  EXPECT_EQ(header_scope(""), "");
  for (const char* v :
       {"cert:O=Acme,CN=alice", "hmac:00ff", "header:x", "header:cert:x", "ns:v2:tenant"}) {
    const std::string s = header_scope(v);
    EXPECT_FALSE(s.starts_with("cert:") || s.starts_with("hmac:") || s.starts_with("ns:")) << v;
    EXPECT_EQ(s, std::string("header:") + v);
  }
  const std::vector<std::string> values = {"a",
                                           "header:a",
                                           "header:header:a",
                                           "cert:a",
                                           "header:cert:a",
                                           "hmac:a",
                                           "header:hmac:a",
                                           "ns:a",
                                           "header:ns:a",
                                           ""};
  std::set<std::string> scopes;
  for (const auto& v : values) scopes.insert(header_scope(v));
  EXPECT_EQ(scopes.size(), values.size());
}

// Issue 22: RFC 8941 §3.3 makes Idempotency-Key an Item. A List (what two field lines
// combine into, RFC 9110 §5.3), an Inner List or a Dictionary is not one key.
TEST(ParseKey, ListsInnerListsAndDictionariesAreNotKeys) {
  for (const char* v : {"a, b", "a,b", "\"a\", \"b\"", "\"a\" ,b", "(a b)", "(\"a\")", "k=\"v\"",
                        "a=1, b=2", "uuid-1, uuid-1"}) {
    auto r = parse_key(v);
    ASSERT_TRUE(std::holds_alternative<KeyError>(r)) << "accepted: " << v;
    EXPECT_NE(std::get<KeyError>(r).reason.find("RFC 8941 section 3.3"), std::string::npos) << v;
  }
  // Bare keys with other punctuation stay keys: base64, paths, UUIDs.
  EXPECT_EQ(ok("YWJjZA=="), "YWJjZA==");
  EXPECT_EQ(ok("orders/42:retry"), "orders/42:retry");
  EXPECT_EQ(ok("\"a, b\""), "a, b");  // a comma inside an sf-string is the key's own
}

// Issue 24 item 1: webhook deliveries carry their key in the body (a Stripe event's
// id). RFC 6901 pointers; the value is a string or an integer (its decimal text).
TEST(KeyFromJson, FindsStringsAndIntegersAtThePointer) {
  using idemproxy::engine::BodyKey;
  using idemproxy::engine::key_from_json;
  const std::string event =
      R"({"id": "evt_1", "data": {"object": {"id": 42, "a/b": "s", "m~n": "t"}},
                                "list": ["x", "y"]})";
  const auto at = [&](const char* pointer) { return key_from_json(event, pointer); };
  EXPECT_EQ(at("/id").key, "evt_1");
  EXPECT_EQ(at("/data/object/id").key, "42");
  EXPECT_EQ(at("/data/object/a~1b").key, "s");  // RFC 6901 section 3: ~1 is '/'
  EXPECT_EQ(at("/data/object/m~0n").key, "t");  // and ~0 is '~'
  EXPECT_EQ(at("/list/1").key, "y");
  EXPECT_EQ(at("/id").found, BodyKey::Found::key);
  EXPECT_EQ(key_from_json(R"({"n": -7})", "/n").key, "-7");
  EXPECT_EQ(key_from_json(R"({"n": 18446744073709551615})", "/n").key, "18446744073709551615");
  for (const char* absent : {"/nope", "/data/nope/id", "/list/2", "/list/x", "/id/deeper"}) {
    const auto r = at(absent);
    EXPECT_EQ(r.found, BodyKey::Found::absent) << absent << ": " << r.reason;
    EXPECT_TRUE(r.key.empty());
  }
}

TEST(KeyFromJson, RefusesWhatIsNotAUsableKeyNamingThePointer) {
  using idemproxy::engine::BodyKey;
  using idemproxy::engine::key_from_json;
  const std::string too_long = R"({"id": ")" + std::string(256, 'k') + "\"}";
  for (const auto& [body, says] : std::vector<std::pair<std::string, std::string>>{
           {"", "not valid JSON"},
           {R"({"id": "a")", "not valid JSON"},
           {R"({"id": "a"} trailing)", "not valid JSON"},
           {R"({"id": 1.5})", "the value is number"},
           {R"({"id": 1e3})", "the value is number"},
           {R"({"id": null})", "the value is null"},
           {R"({"id": true})", "the value is boolean"},
           {R"({"id": ["a"]})", "the value is array"},
           {R"({"id": ""})", "the key is empty"},
           {R"({"id": "caf\u00e9"})", "printable ASCII"},
           {R"({"id": "a\nb"})", "printable ASCII"},
           {too_long, "longer than 255"}}) {
    const auto r = key_from_json(body, "/id");
    EXPECT_EQ(r.found, BodyKey::Found::refused) << body;
    EXPECT_NE(r.reason.find("key_json_pointer /id: "), std::string::npos) << r.reason;
    EXPECT_NE(r.reason.find(says), std::string::npos) << body << " -> " << r.reason;
  }
  EXPECT_EQ(key_from_json(R"({"id": ")" + std::string(255, 'k') + "\"}", "/id").key.size(), 255U);
}

TEST(JsonPointerError, AcceptsRfc6901PointersToAMemberOnly) {
  using idemproxy::engine::json_pointer_error;
  for (const char* good : {"/id", "/data/object/id", "/a~1b", "/m~0n", "/0", "/"}) {
    EXPECT_FALSE(json_pointer_error(good)) << good;
  }
  for (const char* bad : {"", "id", "#/id", "/a~2", "/a~"})
    EXPECT_TRUE(json_pointer_error(bad)) << bad;
}

// max_key_age: a UUIDv7 carries its minting time in its first 48 bits (RFC 9562 5.7).
TEST(Uuid7Time, ReadsTheMintingTimeOfVersion7UuidsOnly) {
  using idemproxy::engine::uuid7_time;
  // RFC 9562 appendix A.6's example: 017F22E2-79B0-7CC3-98C4-DC0C0C07398F, minted
  // Tuesday, February 22, 2022 2:22:22.00 PM GMT-05:00.
  const auto t = uuid7_time("017F22E2-79B0-7CC3-98C4-DC0C0C07398F");
  ASSERT_TRUE(t);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count(),
            1645557742000);
  EXPECT_TRUE(uuid7_time("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"));
  for (const char* other : {"919108f7-52d1-4320-9bac-f847db4148a8",   // v4
                            "017f22e2-79b0-7cc3-78c4-dc0c0c07398f",   // wrong variant
                            "017f22e2-79b0-7cc3-98c4-dc0c0c07398",    // short
                            "017f22e279b07cc398c4dc0c0c07398f",       // no hyphens
                            "017f22e2-79b0-7cc3-98c4-dc0c0c07398g"})  // not hex
    EXPECT_FALSE(uuid7_time(other)) << other;
}
