// What the fingerprint covers (the `fingerprint` section), over both codecs, in this
// process: the real codecs and phases, an upstream that counts what it executes, and
// two proxies that share one memory store, as two instances briefly running different
// configs share one database.
#include <gtest/gtest.h>

#include "world.hpp"

namespace idemproxy::testing::fingerprint_rules_test {
namespace {

const char* kWholeBody = R"(store: {memory: {}}
routes:
  - {name: orders, path_prefix: /v1/orders}
)";

const char* kRules = R"(store: {memory: {}}
routes:
  - name: orders
    path_prefix: /v1/orders
    fingerprint: {json_exclude: [/trace_id], query: none}
  - name: accounts
    path_prefix: /v1/accounts
    fingerprint: {json_include: [/amount, /items/0/sku], headers: [X-Account]}
)";

Request keyed(std::string key, std::string body, std::string path = "/v1/orders",
              std::vector<Field> more = {}) {
  Request r{"POST",
            std::move(path),
            {{"Idempotency-Key", std::move(key)}, {"Content-Type", "application/json"}},
            std::move(body),
            {}};
  for (auto& f : more) r.fields.push_back(std::move(f));
  return r;
}

bool replayed(const Reply& r) { return r.field("Idempotent-Replayed") == "true"; }

class FingerprintRules : public ::testing::TestWithParam<Codec> {
 protected:
  Reply send(World& w, const Request& r) { return w.send(GetParam(), r); }
  int executions(const std::string& key) { return whole.executions(key) + rules.executions(key); }

  FakeClock clock;
  store::MemoryStore memory{clock};
  World whole{kWholeBody, &memory};
  World rules{kRules, &memory};
};

TEST_P(FingerprintRules, WhatTheRuleLeavesOutMayChangeBetweenRetries) {
  ASSERT_EQ(send(rules, keyed("o-1", R"({"amount":1,"trace_id":"t1"})", "/v1/orders?sig=a")).status,
            201);
  const Reply again =
      send(rules, keyed("o-1", R"({"trace_id":"t2","amount":1})", "/v1/orders?sig=b&ts=2"));
  EXPECT_TRUE(replayed(again)) << again.body;
  const Reply other = send(rules, keyed("o-1", R"({"amount":2,"trace_id":"t1"})"));
  EXPECT_EQ(other.status, 422);
  EXPECT_TRUE(problem_type(other).ends_with("/key-mismatch")) << other.body;
  EXPECT_EQ(executions("o-1"), 1);
}

TEST_P(FingerprintRules, IncludedMembersAndHeaderFieldsDecide) {
  const std::vector<Field> acme{{"X-Account", "acme"}};
  const std::string body = R"({"amount":5,"items":[{"sku":"A","note":"x"}],"memo":"hi"})";
  ASSERT_EQ(send(rules, keyed("a-1", body, "/v1/accounts", acme)).status, 201);
  // Reworded free text, another note: the same request under this rule.
  EXPECT_TRUE(
      replayed(send(rules, keyed("a-1", R"({"memo":"hello","items":[{"sku":"A"}],"amount":5})",
                                 "/v1/accounts", acme))));
  // The very same bytes under another account are another request: not even the
  // in-memory replay of identical bytes may answer it.
  EXPECT_EQ(send(rules, keyed("a-1", body, "/v1/accounts", {{"X-Account", "globex"}})).status, 422);
  EXPECT_EQ(send(rules, keyed("a-1", body, "/v1/accounts")).status, 422);  // no account
  // Absent and null differ.
  EXPECT_EQ(
      send(rules, keyed("a-1", R"({"amount":5,"items":[{"sku":null}]})", "/v1/accounts", acme))
          .status,
      422);
  EXPECT_EQ(executions("a-1"), 1);
}

// Two instances, or one before and after a reload: a record is judged under the rule
// it was fingerprinted with, so a rule change never turns an honest retry into 422,
// and never lets another request replay an answer either.
TEST_P(FingerprintRules, ARecordIsJudgedUnderTheRuleThatMadeIt) {
  const std::string body = R"({"amount":1,"trace_id":"t1"})";
  // Made under the whole-body rule; retried where the rule leaves trace_id out.
  ASSERT_EQ(send(whole, keyed("r-1", body)).status, 201);
  EXPECT_TRUE(replayed(send(rules, keyed("r-1", body))));
  EXPECT_EQ(send(rules, keyed("r-1", R"({"amount":1,"trace_id":"t2"})")).status, 422);
  // Made under the narrower rule; retried where the whole body counts.
  ASSERT_EQ(send(rules, keyed("r-2", body)).status, 201);
  EXPECT_TRUE(replayed(send(whole, keyed("r-2", R"({"amount":1,"trace_id":"t9"})"))));
  EXPECT_EQ(send(whole, keyed("r-2", R"({"amount":2,"trace_id":"t1"})")).status, 422);
  EXPECT_EQ(executions("r-1") + executions("r-2"), 2);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, FingerprintRules,
                         ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::fingerprint_rules_test
