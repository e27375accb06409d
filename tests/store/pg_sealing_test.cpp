// PgStore with store.encryption: what the rows hold, key rotation, moved fields.
#include "pg_store_fixture.hpp"

namespace {

const std::string kCard = "{\"card\":\"4242424242424242\",\"cvc\":\"123\"}";
const StoredResponse kSecret{201, {{"Set-Token", "tok_live_SECRET"}}, kCard};

// The raw row, as a database dump would show it.
pqxx::row raw_row(const RecordId& id) {
  pqxx::connection c(dsn());
  pqxx::nontransaction tx(c);
  return tx.exec_params1(
      "SELECT fingerprint, headers, body, key_id, encode(headers, 'escape') || "
      "encode(body, 'escape') FROM idempotency_records WHERE scope = $1 AND key = $2",
      id.scope, id.key);
}

}  // namespace

TEST_F(PgStoreTest, SealedRecordsHoldNoPlaintextAndReadBackWhole) {
  PgStore sealed({dsn(), 2, 5s, false, ring({{"k1", 1}})});
  const auto req = request("sealed", 30s, 1h, "fp-of-a-card-body");
  auto claimed = sealed.claim(req);
  ASSERT_TRUE(claimed.ok());
  const auto token = std::get<Claimed>(claimed.value()).token;
  ASSERT_TRUE(sealed.complete(req.id, token, kSecret, 1h).ok());

  const auto row = raw_row(req.id);
  EXPECT_EQ(row[3].as<std::string>(), "k1");
  EXPECT_EQ(row[0].as<std::string>().find("fp-of-a-card-body"), std::string::npos);
  const auto dump = row[4].as<std::string>();
  for (const char* secret : {"4242", "tok_live_SECRET", "cvc", "Set-Token"}) {
    EXPECT_EQ(dump.find(secret), std::string::npos) << secret;
  }

  auto again = sealed.claim(req);  // the replay path: same fingerprint, opened body
  ASSERT_TRUE(again.ok());
  const auto& r = std::get<Record>(again.value());
  EXPECT_EQ(r.fingerprint, "fp-of-a-card-body");
  ASSERT_TRUE(r.response.has_value());
  EXPECT_EQ(r.response->body, kCard);
  EXPECT_EQ(r.response->headers, kSecret.headers);
}

TEST_F(PgStoreTest, RotatedKeysKeepOldRecordsReadableAndSealNewOnesWithTheNewKey) {
  PgStore before({dsn(), 1, 5s, false, ring({{"2026-05", 5}})});
  const auto old_req = request("old");
  const auto t1 = std::get<Claimed>(before.claim(old_req).value()).token;
  ASSERT_TRUE(before.complete(old_req.id, t1, kSecret, 1h).ok());

  PgStore after({dsn(), 1, 5s, false, ring({{"2026-11", 11}, {"2026-05", 5}})});
  const auto new_req = request("new");
  const auto t2 = std::get<Claimed>(after.claim(new_req).value()).token;
  ASSERT_TRUE(after.complete(new_req.id, t2, kSecret, 1h).ok());
  EXPECT_EQ(raw_row(old_req.id)[3].as<std::string>(), "2026-05");
  EXPECT_EQ(raw_row(new_req.id)[3].as<std::string>(), "2026-11");
  EXPECT_EQ(after.find(old_req.id).value()->response->body, kCard);
  EXPECT_EQ(after.find(new_req.id).value()->response->body, kCard);

  // Once the old key is dropped from the ring, its records no longer open: an
  // error, never a wrong answer.
  PgStore dropped({dsn(), 1, 5s, false, ring({{"2026-11", 11}})});
  auto old_found = dropped.find(old_req.id);
  ASSERT_FALSE(old_found.ok());
  EXPECT_EQ(old_found.error().code, StoreErrc::unreadable);
  EXPECT_NE(old_found.error().detail.find("2026-05"), std::string::npos);
  auto old_claim = dropped.claim(old_req);
  ASSERT_FALSE(old_claim.ok());
  EXPECT_EQ(old_claim.error().code, StoreErrc::unreadable);
  EXPECT_TRUE(dropped.find(new_req.id).ok());
  EXPECT_TRUE(dropped.ping().ok());  // the unreadable row did not cost a connection
}

TEST_F(PgStoreTest, ASealedBodyMovedToAnotherRecordDoesNotOpen) {
  // An attacker with write access to the table copies one tenant's sealed response
  // into another tenant's record: the authenticated context (scope, key, field) differs.
  PgStore sealed({dsn(), 1, 5s, false, ring({{"k1", 1}})});
  const auto a = request("victim");
  const auto b = request("attacker");
  for (const auto& r : {a, b}) {
    const auto t = std::get<Claimed>(sealed.claim(r).value()).token;
    ASSERT_TRUE(sealed.complete(r.id, t, kSecret, 1h).ok());
  }
  {
    pqxx::connection c(dsn());
    pqxx::nontransaction tx(c);
    // Read, then write: on Citus the two rows may live on different shards.
    const pqxx::binarystring body(
        tx.exec_params1("SELECT body FROM idempotency_records WHERE scope = $1 AND key = $2",
                        a.id.scope, a.id.key)[0]);
    tx.exec_params("UPDATE idempotency_records SET body = $3 WHERE scope = $1 AND key = $2",
                   b.id.scope, b.id.key, body);
  }
  auto found = sealed.find(b.id);
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.error().code, StoreErrc::unreadable);
  EXPECT_TRUE(sealed.find(a.id).ok());
}

TEST_F(PgStoreTest, PlainRecordsStayReadableAfterEncryptionIsTurnedOn) {
  const auto req = request("plain");
  const auto t = claim_token(req);
  ASSERT_TRUE(store->complete(req.id, t, kSecret, 1h).ok());
  PgStore sealed({dsn(), 1, 5s, false, ring({{"k1", 1}})});
  EXPECT_EQ(sealed.find(req.id).value()->response->body, kCard);
  // The reverse is refused: a sealed record read without the key is an error.
  const auto sreq = request("sealed-then-plain");
  const auto st = std::get<Claimed>(sealed.claim(sreq).value()).token;
  ASSERT_TRUE(sealed.complete(sreq.id, st, kSecret, 1h).ok());
  auto plain_read = store->find(sreq.id);
  ASSERT_FALSE(plain_read.ok());
  EXPECT_EQ(plain_read.error().code, StoreErrc::unreadable);
  // Listing (admin API, keys list) still works, and shows which key sealed the row.
  auto listed = store->list(RecordState::completed, 1000);
  ASSERT_TRUE(listed.ok()) << listed.error().detail;
  bool seen = false;
  for (const auto& r : listed.value()) {
    if (r.id.key == sreq.id.key && r.id.scope == sreq.id.scope) {
      seen = true;
      EXPECT_EQ(r.fingerprint, "(sealed with key k1)");
    }
  }
  EXPECT_TRUE(seen);
}

// Group commit. A store with one connection is held busy by a completion that waits
// on a row lock the test holds from outside; everything submitted meanwhile queues,
// and runs as one batch once the lock is let go.

// A streamed answer's chunks are sealed one by one, each bound to its record and its
// place: none holds plaintext, and one swapped with another does not open.
TEST_F(PgStoreTest, SealedChunksHoldNoPlaintextAndASwappedChunkDoesNotOpen) {
  PgStore sealed({dsn(), 2, 5s, false, ring({{"k1", 1}})});
  const auto req = request("chunks");
  const auto token = std::get<Claimed>(sealed.claim(req).value()).token;
  ASSERT_TRUE(sealed.append(req.id, token, 1, "data: {\"card\":\"4242424242424242\"}\n\n").ok());
  ASSERT_TRUE(sealed.append(req.id, token, 2, "data: {\"cvc\":\"123\"}\n\n").ok());
  StoredResponse answer{200, {{"Content-Type", "text/event-stream"}}, "", true};
  answer.chunks = 2;
  answer.body_length = 60;
  answer.body_digest = std::string(32, 'd');
  ASSERT_TRUE(sealed.complete(req.id, token, answer, 1h).ok());

  pqxx::connection c(dsn());
  {
    pqxx::nontransaction tx(c);
    const auto rows = tx.exec_params(
        "SELECT key_id, encode(bytes, 'escape') FROM idempotency_chunks"
        " WHERE scope = $1 AND key = $2 ORDER BY seq",
        req.id.scope, req.id.key);
    ASSERT_EQ(rows.size(), 2U);
    for (const auto& row : rows) {
      EXPECT_EQ(row[0].as<std::string>(), "k1");
      for (const char* secret : {"4242", "card", "cvc", "data:"})
        EXPECT_EQ(row[1].as<std::string>().find(secret), std::string::npos) << secret;
    }
    const auto digest = tx.exec_params1(
        "SELECT encode(body_digest, 'escape') FROM idempotency_records WHERE scope = $1 AND "
        "key = $2",
        req.id.scope, req.id.key);
    EXPECT_EQ(digest[0].as<std::string>().find("dddd"), std::string::npos);
  }
  const auto opened = sealed.read_chunks(req.id, token, 1, 10);
  ASSERT_TRUE(opened.ok()) << opened.error().detail;
  ASSERT_EQ(opened.value().size(), 2U);
  EXPECT_EQ(opened.value()[1].bytes, "data: {\"cvc\":\"123\"}\n\n");
  EXPECT_EQ(sealed.find(req.id).value()->response->body_digest, std::string(32, 'd'));

  // Swapped in place: each row now holds the other's sealed bytes.
  {
    pqxx::work tx(c);
    tx.exec_params(
        "UPDATE idempotency_chunks c SET bytes = o.bytes FROM idempotency_chunks o"
        " WHERE c.scope = $1 AND c.key = $2 AND o.scope = c.scope AND o.key = c.key"
        " AND o.token = c.token AND o.seq = 3 - c.seq",
        req.id.scope, req.id.key);
    tx.commit();
  }
  const auto swapped = sealed.read_chunks(req.id, token, 1, 10);
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.error().code, StoreErrc::unreadable);
}
