// The canonical JSON form behind fingerprints (issue 10, defects 4 and 7).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "idemproxy/engine/fingerprint.hpp"

using idemproxy::engine::canonical_json;
using idemproxy::engine::canonicalize_json;
using idemproxy::engine::fingerprint;

namespace {

std::string fp(const std::string& body) {
  return fingerprint("POST", "/v1/orders", "application/json", body);
}

}  // namespace

TEST(CanonicalJsonExact, NumbersAreReadFromTheirTextNotThroughADouble) {
  EXPECT_NE(fp(R"({"amount": 100.10000000000000001})"), fp(R"({"amount": 100.1})"));
  EXPECT_NE(fp(R"({"n": 18446744073709551616})"), fp(R"({"n": 18446744073709551617})"));
  EXPECT_NE(fp(R"({"n": 123456789012345678901234567890})"),
            fp(R"({"n": 123456789012345678901234567891})"));
  EXPECT_NE(fp(R"({"n": 1e400})"), fp(R"({"n": 2e400})"));
  // Found by fuzz_fingerprint: huge exponents were clamped, so these were equal.
  EXPECT_NE(fp("81e4098888888888888"), fp("81e5098888888888888"));
  EXPECT_EQ(canonicalize_json("81e4098888888888888", 128), std::nullopt);
  EXPECT_EQ(canonicalize_json("1e000000000000000000001", 128), "10.0");
  EXPECT_NE(fp(R"({"n": 1})"), fp(R"({"n": 1.0})"));  // integer and real literals differ
  // The same value in other spellings.
  EXPECT_EQ(fp(R"({"n": 100.10})"), fp(R"({"n": 100.1})"));
  EXPECT_EQ(fp(R"({"n": 1.001e2})"), fp(R"({"n": 100.1})"));
  EXPECT_EQ(fp(R"({"n": 1001E-1})"), fp(R"({"n": 100.1})"));
  EXPECT_EQ(fp(R"({"n": -0})"), fp(R"({"n": 0})"));
}

TEST(CanonicalJsonExact, DuplicateMembersNeverCollideWithAnotherBody) {
  EXPECT_NE(fp(R"({"amount":1,"amount":1000})"), fp(R"({"amount":1000})"));
  EXPECT_NE(fp(R"({"amount":1,"amount":1000})"), fp(R"({"amount":1000,"amount":1})"));
  EXPECT_EQ(fp(R"({"b":0,"amount":1,"amount":2})"), fp(R"({"amount":1,"amount":2,"b":0})"));
}

TEST(CanonicalJsonExact, DeepNestingIsNotRecursedAndFallsBackToTheBytes) {
  const std::string deep = std::string(75000, '[') + std::string(75000, ']');
  EXPECT_EQ(canonicalize_json(deep, 128), std::nullopt);
  EXPECT_EQ(canonical_json(deep), deep);
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 200000; ++i) s += R"({"a":)";
    s += "1";
    s += std::string(200000, '}');
    return s;
  }();
  EXPECT_EQ(canonicalize_json(deep_objects, 128), std::nullopt);
  // Within the limit, deep documents are canonicalised; the limit is configurable.
  const std::string ok = std::string(128, '[') + std::string(128, ']');
  EXPECT_EQ(canonicalize_json(ok, 128), ok);
  EXPECT_EQ(canonicalize_json(ok, 127), std::nullopt);
  // Its bytes, not a canonical form: the same document with other whitespace differs.
  const std::string spaced = std::string(200, '[') + " " + std::string(200, ']');
  EXPECT_NE(fp(deep), fp(spaced));
}

TEST(CanonicalJsonExact, RejectsWhatRfc8259Rejects) {
  for (const char* bad : {"",
                          "{",
                          "[1,]",
                          "{\"a\":}",
                          "01",
                          "1.",
                          ".5",
                          "-",
                          "1e",
                          "+1",
                          "\"\\ud800\"",
                          "\"\\udc00\"",
                          "\"\\x\"",
                          "\"a\nb\"",
                          "\"\xff\"",
                          "\"\xed\xa0\x80\"",
                          "\"\xc0\xaf\"",
                          "tru",
                          "nul",
                          "[1] x",
                          "{1:2}",
                          "{\"a\" 1}",
                          "[1 2]"}) {
    EXPECT_EQ(canonicalize_json(bad, 128), std::nullopt) << bad;
  }
}

// Records stored before this canonicaliser were fingerprinted through nlohmann's
// dump(); ordinary documents must canonicalise to the same text, so their retries
// still replay.
TEST(CanonicalJsonExact, MatchesTheFormerFormForOrdinaryDocuments) {
  for (const char* doc :
       {R"({"b": 1, "a": [1, 2, {"d": null, "c": true}]})", R"({"amount": 100.1, "qty": 3})",
        R"([0.1, 1.5, -2.25, 1e2, 1E-7, 123456.789, 0.0001, 1e15, 1e16, 3.0e-5, -0.0])",
        R"({"s": "caf\u00e9 \"q\" \\ \/ \b\f\n\r\t \u0001 \u007f \ud83d\ude00"})",
        R"({"z": {"y": [], "x": {}}, "": "", "A": false, "a": null})",
        R"([9223372036854775807, -9223372036854775808, 18446744073709551615, -0])",
        R"("just a string")", "42", "true", R"([1.7976931348623157e308, 5e-324, 2.5e-10])"}) {
    const auto ours = canonicalize_json(doc, 128);
    ASSERT_TRUE(ours) << doc;
    EXPECT_EQ(*ours, nlohmann::json::parse(doc).dump()) << doc;
  }
}

// Property: random documents written in other bytes (member order, whitespace,
// escapes, number spellings) canonicalise alike; changing one value never does.
namespace {

struct Gen {
  std::mt19937_64 rng;
  int pick(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }

  // A value as a small tree, written out by write().
  nlohmann::ordered_json value(int depth) {
    switch (depth > 3 ? pick(4) : pick(6)) {
      case 0:
        return pick(2) == 0;
      case 1:
        return static_cast<std::int64_t>(rng() % 2000000) - 1000000;
      case 2:
        return std::string(1 + pick(6), static_cast<char>('a' + pick(26)));
      case 3:
        return nullptr;
      case 4: {
        nlohmann::ordered_json a = nlohmann::ordered_json::array();
        for (int i = pick(4); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::ordered_json o = nlohmann::ordered_json::object();
        for (int i = pick(4); i > 0; --i)
          o[std::string(1, static_cast<char>('a' + pick(8)))] = value(depth + 1);
        return o;
      }
    }
  }

  std::string ws() { return std::string(static_cast<std::size_t>(pick(3)), " \n\t"[pick(3)]); }

  // Writes v in random but equivalent bytes.
  std::string write(const nlohmann::ordered_json& v, bool vary) {
    if (v.is_object()) {
      std::vector<std::string> members;
      for (auto it = v.begin(); it != v.end(); ++it) {
        members.push_back(ws() + escape(it.key(), vary) + ws() + ":" + ws() +
                          write(it.value(), vary));
      }
      if (vary) std::shuffle(members.begin(), members.end(), rng);
      std::string s = "{";
      for (std::size_t i = 0; i < members.size(); ++i) s += (i ? "," : "") + members[i];
      return s + ws() + "}";
    }
    if (v.is_array()) {
      std::string s = "[";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + ws() + write(v[i], vary);
      return s + ws() + "]";
    }
    if (v.is_string()) return escape(v.get<std::string>(), vary);
    return v.dump();
  }

  std::string escape(const std::string& s, bool vary) {
    std::string out = "\"";
    for (const char c : s) {
      if (vary && pick(3) == 0) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned char>(c));
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }
};

void change_one_leaf(nlohmann::ordered_json& v, Gen& g) {
  if (v.is_object() && !v.empty()) {
    auto it = v.begin();
    std::advance(it, g.pick(static_cast<int>(v.size())));
    return change_one_leaf(it.value(), g);
  }
  if (v.is_array() && !v.empty()) return change_one_leaf(v[g.pick(static_cast<int>(v.size()))], g);
  if (v.is_number_integer())
    v = v.get<std::int64_t>() + 1;
  else if (v.is_string())
    v = v.get<std::string>() + "x";
  else if (v.is_boolean())
    v = !v.get<bool>();
  else if (v.is_null())
    v = 0;
  else if (v.is_object())
    v["added"] = 1;  // an empty object
  else
    v.push_back(1);  // an empty array
}

}  // namespace

TEST(CanonicalJsonProperty, SameMeaningSameFingerprintOtherMeaningOther) {
  Gen g{std::mt19937_64{20261122}};
  for (int i = 0; i < 3000; ++i) {
    auto doc = g.value(0);
    const std::string plain = g.write(doc, false);
    const std::string varied = g.write(doc, true);
    ASSERT_EQ(fp(plain), fp(varied)) << plain << "\n" << varied;
    auto changed = doc;
    change_one_leaf(changed, g);
    ASSERT_NE(fp(plain), fp(g.write(changed, true))) << plain;
  }
}
