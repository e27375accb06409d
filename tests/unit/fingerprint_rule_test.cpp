// What a route's fingerprint covers (engine/fingerprint_rule.hpp): JSON pointers to
// include or exclude, the query parameters and header fields that count, and the
// rule a record keeps beside its digest.
#include "idemproxy/engine/fingerprint_rule.hpp"

#include <gtest/gtest.h>

#include <map>

#include "idemproxy/engine/fingerprint.hpp"

using namespace idemproxy::engine;

namespace {

std::string of(const FingerprintRule& rule, std::string_view body,
               std::string_view target = "/v1/orders",
               std::map<std::string, std::string> headers = {},
               std::string_view content_type = "application/json") {
  RequestParts parts{"POST", target, content_type, body, nullptr};
  parts.header = [headers](std::string_view name) {
    const auto it = headers.find(std::string(name));
    return it == headers.end() ? std::string() : it->second;
  };
  return fingerprint(rule, parts, kMaxJsonDepth);
}

FingerprintRule including(std::vector<std::string> pointers) {
  FingerprintRule r;
  r.include = std::move(pointers);
  return r;
}

FingerprintRule excluding(std::vector<std::string> pointers) {
  FingerprintRule r;
  r.exclude = std::move(pointers);
  return r;
}

}  // namespace

TEST(FingerprintRule, TheDefaultRuleIsTheFingerprintRecordsAlwaysHad) {
  const FingerprintRule rule;
  EXPECT_TRUE(rule.is_default());
  EXPECT_EQ(rule.spelling(), "");
  EXPECT_EQ(of(rule, R"({"a":1})", "/v1/orders?x=1"),
            fingerprint("POST", "/v1/orders?x=1", "application/json", R"({"a":1})"));
  EXPECT_EQ(of(rule, R"({"a":1})").size(), 64u);
  EXPECT_EQ(rule_of(of(rule, "{}")), rule);
}

TEST(FingerprintRule, IncludedMembersAloneCountAndAbsentDiffersFromNull) {
  const auto rule = including({"/amount", "/currency"});
  const auto base = of(rule, R"({"amount":100,"currency":"eur","trace":"a1"})");
  EXPECT_EQ(base, of(rule, R"({"trace":"b2", "currency":"eur","amount":100})"));
  EXPECT_NE(base, of(rule, R"({"amount":101,"currency":"eur"})"));
  EXPECT_NE(of(rule, R"({"amount":100})"), of(rule, R"({"amount":100,"currency":null})"));
  // Exact numbers: no rounding through a double makes two amounts one.
  EXPECT_NE(of(rule, R"({"amount":12345678901234567890123})"),
            of(rule, R"({"amount":12345678901234567890124})"));
  EXPECT_NE(of(rule, R"({"amount":0.1})"), of(rule, R"({"amount":0.10000000000000001})"));
  // A number never equals a string, however spelled.
  EXPECT_NE(of(rule, R"({"amount":1.5})"), of(rule, R"({"amount":"1.5"})"));
}

TEST(FingerprintRule, PointersReachIntoArraysAndNestedMembers) {
  const auto rule = including({"/items/0/sku", "/customer/id"});
  const auto base =
      of(rule, R"({"items":[{"sku":"A","note":"x"},{"sku":"B"}],"customer":{"id":7}})");
  EXPECT_EQ(
      base,
      of(rule, R"({"items":[{"sku":"A","note":"y"},{"sku":"C"}],"customer":{"id":7,"n":1}})"));
  EXPECT_NE(base, of(rule, R"({"items":[{"sku":"B"}],"customer":{"id":7}})"));
  EXPECT_NE(base, of(rule, R"({"items":[],"customer":{"id":7}})"));
  // An index past any size names nothing, never an error.
  const auto huge = including({"/items/99999999999999999999999"});
  EXPECT_EQ(of(huge, R"({"items":[1]})"), of(huge, R"({"items":[2]})"));
  EXPECT_EQ(of(excluding({"/items/99999999999999999999999"}), R"({"items":[1]})").size(),
            excluding({"/items/99999999999999999999999"}).spelling().size() + 64);
}

TEST(FingerprintRule, ExcludedMembersDoNotCountAndArrayIndexesMeanTheOriginal) {
  const auto rule = excluding({"/trace_id", "/meta/sent_at"});
  const auto base = of(rule, R"({"amount":1,"trace_id":"t1","meta":{"sent_at":1,"v":2}})");
  EXPECT_EQ(base, of(rule, R"({"amount":1,"trace_id":"t2","meta":{"sent_at":9,"v":2}})"));
  EXPECT_EQ(base, of(rule, R"({"amount":1,"meta":{"v":2}})"));
  EXPECT_NE(base, of(rule, R"({"amount":2,"trace_id":"t1","meta":{"sent_at":1,"v":2}})"));
  // /a/1 and /a/10 name elements of the array as sent, whatever is removed first.
  std::string many = R"({"a":[0,1,2,3,4,5,6,7,8,9,10,11]})";
  std::string other = R"({"a":[0,"x",2,3,4,5,6,7,8,9,"y",11]})";
  const auto digest = [](const std::string& f) { return f.substr(f.size() - 64); };
  EXPECT_EQ(digest(of(excluding({"/a/1", "/a/10"}), many)),
            digest(of(excluding({"/a/10", "/a/1"}), other)));
  EXPECT_NE(of(excluding({"/a/1"}), many), of(excluding({"/a/1"}), other));
}

TEST(FingerprintRule, TheQueryCountsAllNoneOrTheListedParameters) {
  FingerprintRule none;
  none.query = FingerprintRule::Query::none;
  EXPECT_EQ(of(none, "{}", "/v1/orders?sig=a&ts=1"), of(none, "{}", "/v1/orders?sig=b"));
  EXPECT_NE(of(none, "{}", "/v1/orders?x=1"), of(none, "{}", "/v1/other?x=1"));
  FingerprintRule listed;
  listed.query = FingerprintRule::Query::listed;
  listed.query_params = {"account"};
  EXPECT_EQ(of(listed, "{}", "/v1/o?account=1&ts=5"), of(listed, "{}", "/v1/o?ts=6&account=1"));
  EXPECT_NE(of(listed, "{}", "/v1/o?account=1"), of(listed, "{}", "/v1/o?account=2"));
  EXPECT_NE(of(listed, "{}", "/v1/o?account=1"), of(listed, "{}", "/v1/o"));
}

TEST(FingerprintRule, ListedHeaderFieldsCountAndNoneByDefault) {
  EXPECT_EQ(of(FingerprintRule{}, "{}", "/", {{"x-account", "1"}}),
            of(FingerprintRule{}, "{}", "/", {{"x-account", "2"}}));
  FingerprintRule rule;
  rule.headers = {"x-account"};
  EXPECT_NE(of(rule, "{}", "/", {{"x-account", "1"}}), of(rule, "{}", "/", {{"x-account", "2"}}));
  EXPECT_EQ(of(rule, "{}", "/", {{"x-account", "1"}, {"x-other", "a"}}),
            of(rule, "{}", "/", {{"x-account", "1"}, {"x-other", "b"}}));
  EXPECT_EQ(of(rule, "{}", "/", {}), of(rule, "{}", "/", {{"x-account", ""}}));  // absent reads ""
}

TEST(FingerprintRule, ABodyThatIsNotJsonCountsByItsBytes) {
  const auto rule = including({"/amount"});
  EXPECT_NE(of(rule, "amount=1", "/", {}, "application/x-www-form-urlencoded"),
            of(rule, "amount=2", "/", {}, "application/x-www-form-urlencoded"));
  EXPECT_NE(of(rule, R"({"amount":1,)"), of(rule, R"({"amount":1,"b":2)"));  // not JSON
  EXPECT_EQ(of(rule, R"({"amount":1,"b":2})"), of(rule, R"({"amount":1,"b":3})"));
  // JSON with a number past a double's range counts whole, by its canonical form:
  // the same request in other bytes still matches (found by fuzz_fingerprint).
  EXPECT_EQ(of(rule, R"([1e400, -0, "\u00e9"])"), of(rule, R"([1e400,-0,"\u00e9"])"));
  EXPECT_NE(of(rule, R"([1e400])"), of(rule, R"([1e401])"));
}

TEST(FingerprintRule, ARecordKeepsItsRuleAheadOfItsDigest) {
  FingerprintRule rule = including({"/amount", "/a~1b"});
  rule.query = FingerprintRule::Query::listed;
  rule.query_params = {"account"};
  rule.headers = {"x-account"};
  const std::string stored = of(rule, R"({"amount":1})");
  EXPECT_EQ(stored.substr(0, stored.size() - 64), rule.spelling());
  EXPECT_EQ(rule_of(stored), rule);
  EXPECT_EQ(rule_of(of(excluding({"/t"}), "{}")), excluding({"/t"}));
  EXPECT_TRUE(same_rule(stored, of(rule, R"({"amount":2})")));
  EXPECT_FALSE(same_rule(stored, of(FingerprintRule{}, R"({"amount":1})")));
  EXPECT_FALSE(same_rule(stored, of(including({"/amount"}), R"({"amount":1})")));
  // A spelling that is not a rule cannot be read back.
  EXPECT_FALSE(rule_of(std::string("{\"include\":3}") + std::string(64, 'a')));
  EXPECT_FALSE(rule_of(std::string("nonsense") + std::string(64, 'a')));
  EXPECT_FALSE(FingerprintRule::from_spelling("{}"));  // the default is never spelled
}
