// The contract of announcements (store/watches.hpp): watch and wake, purges heard
// everywhere; and of encryption at rest (store.encryption): a record reads back
// whole and says whether, and under which key, it is sealed.
#include "store_contract.hpp"

namespace idemproxy::testing {
namespace {

using store::Record;

TEST_P(StoreContract, AWatchedRecordAnnouncesItsFinishAndAnUnwatchedOneStaysSilent) {
  Heard heard;
  store->watch(heard.watchers(scope));
  const auto started = heard.until(":resumed");
  ASSERT_NE(std::find(started.begin(), started.end(), ":resumed"), started.end());
  EXPECT_TRUE(store->announces_finishes());
  const auto done = claim_token(request("done"));
  const auto quiet = claim_token(request("quiet"));
  const auto released = claim_token(request("released"));
  const auto unknown = claim_token(request("unknown"));
  for (const char* key : {"done", "released", "unknown"}) {
    const auto watched = store->watch_record(id(key));
    ASSERT_TRUE(watched.ok());
    EXPECT_TRUE(watched.value()) << key;
  }
  ASSERT_TRUE(store->complete(id("done"), done, {201, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->complete(id("quiet"), quiet, {201, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->release(id("released"), released).ok());
  ASSERT_TRUE(store->mark_indeterminate(id("unknown"), unknown).ok());
  // Announced in the order they happened: had "quiet" been, it would come before
  // "released".
  std::vector<std::string> finishes;
  for (const auto& e : heard.until("unknown")) {
    if (!e.starts_with(":")) finishes.push_back(e);
  }
  EXPECT_EQ(finishes, (std::vector<std::string>{"done", "released", "unknown"}));
  // Finished, or never there: nothing to wait for.
  EXPECT_FALSE(store->watch_record(id("done")).value());
  EXPECT_FALSE(store->watch_record(id("unknown")).value());
  EXPECT_FALSE(store->watch_record(id("missing")).value());
}

TEST_P(StoreContract, APurgeIsAnnounced) {
  Heard heard;
  store->watch(heard.watchers(scope));
  heard.until(":resumed");
  claim_token(request("first"));
  const auto done = claim_token(request("second"));
  ASSERT_TRUE(store->complete(id("second"), done, {201, {}, "ok"}, 1h).ok());
  ASSERT_TRUE(store->purge(id("first")).value());
  ASSERT_FALSE(store->purge(id("missing")).value());
  ASSERT_TRUE(store->purge(id("second")).value());
  EXPECT_EQ(heard.until("purged:second"),
            (std::vector<std::string>{":resumed", "purged:first", "purged:second"}));
}

TEST_P(StoreContract, ATakeoverClearsTheWatch) {
  Heard heard;
  store->watch(heard.watchers(scope));
  heard.until(":resumed");
  const auto first = claim_token(request("k", kShort));
  ASSERT_TRUE(store->watch_record(id("k")).value());
  age(kPastShort);  // the lease runs out; a retry takes the record over
  const auto second = claim_token(request("k", 30s, 1h, "fp-1", /*retake=*/true));
  EXPECT_GT(second, first);
  ASSERT_TRUE(store->complete(id("k"), second, {201, {}, "ok"}, 1h).ok());
  const auto marker = claim_token(request("marker"));
  ASSERT_TRUE(store->watch_record(id("marker")).value());
  ASSERT_TRUE(store->release(id("marker"), marker).ok());
  EXPECT_EQ(heard.until("marker"), (std::vector<std::string>{":resumed", "marker"}));
}

const store::StoredResponse kSecret{
    201, {{"Set-Token", "tok_live_SECRET"}}, "{\"card\":\"4242424242424242\",\"cvc\":\"123\"}"};

TEST_P(StoreContract, AStoreWithoutAKeyRingKeepsRecordsInTheClear) {
  const auto req = request("plain", 30s, 1h, "fp-of-a-card-body");
  ASSERT_TRUE(store->complete(req.id, claim_token(req), kSecret, 1h).ok());
  for (const Record& r : {found("plain"), existing(req)}) {
    EXPECT_FALSE(r.sealed_with.has_value());
    EXPECT_EQ(r.fingerprint, "fp-of-a-card-body");
    EXPECT_EQ(r.response->body, kSecret.body);
  }
}

TEST_P(StoreContract, ASealedRecordReadsBackWholeAndNamesItsKey) {
  std::vector<store::SealingKey> keys(1);
  keys[0].id = "k1";
  keys[0].bytes.fill(1);
  auto sealed = delegate->make_sealed(std::make_shared<const store::Sealer>(keys));
  if (!sealed) {
    GTEST_SKIP() << "this store keeps nothing at rest: store.encryption applies to "
                    "store.postgres only, and the configuration refuses it elsewhere";
  }
  const auto req = request("sealed", 30s, 1h, "fp-of-a-card-body");
  auto claim = sealed->claim(req);
  ASSERT_TRUE(claim.ok());
  const auto token = std::get<store::Claimed>(claim.value()).token;
  ASSERT_TRUE(sealed->complete(req.id, token, kSecret, 1h).ok());
  auto again = sealed->claim(req);  // the replay path
  ASSERT_TRUE(again.ok());
  const auto found_again = sealed->find(req.id);
  ASSERT_TRUE(found_again.ok() && found_again.value());
  for (const Record& r : {std::get<Record>(again.value()), *found_again.value()}) {
    EXPECT_EQ(r.sealed_with, "k1");
    EXPECT_EQ(r.fingerprint, "fp-of-a-card-body");
    ASSERT_TRUE(r.response.has_value());
    EXPECT_EQ(r.response->headers, kSecret.headers);
    EXPECT_EQ(r.response->body, kSecret.body);
  }
  const auto listed = sealed->list(store::RecordState::completed, 1000);
  ASSERT_TRUE(listed.ok());
  const auto it = std::find_if(listed.value().begin(), listed.value().end(),
                               [&](const Record& r) { return r.id.scope == scope; });
  ASSERT_NE(it, listed.value().end());
  EXPECT_EQ(it->sealed_with, "k1");
  EXPECT_EQ(it->fingerprint, "fp-of-a-card-body");
}

}  // namespace
}  // namespace idemproxy::testing
