// An HTTP/1.1 upstream that answers a request before it reads the body, then closes
// the connection (RFC 9112 9.6; the unread body makes the close a reset), as a server
// that refuses an upload early, or acts on the head alone, does. The proxy's write of
// the body fails, but what the upstream read may have run and its answer is in the
// socket: the answer is relayed, and under a key recorded and replayed. Before, the
// failed write was "the request could not be sent": a 502 upstream-unreachable, the
// key released, and the retry executed again (the upstream saw the key twice; nginx
// relays such an answer).
#include <gtest/gtest.h>

#include <chrono>

#include "world.hpp"

namespace idemproxy::testing::early_answer_test {
namespace {

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: orders, path_prefix: /v1/orders, max_body: 64MiB}
)";

// More than loopback's socket buffers take at once: the upstream's reset comes while
// the proxy still writes.
std::string big_body() { return std::string(std::size_t{24} << 20, 'x'); }

// Sends a big keyed request under `key` twice through `w`, whose upstream answers after
// the head as set: the first gets `status` with the problem `type`; the retry is told
// the outcome is unknown, and the upstream saw the key once.
void expect_indeterminate(World& w, Codec codec, const std::string& key, unsigned status,
                          const std::string& type) {
  auto request = json_post(key);
  request.body = big_body();
  const auto first = w.send(codec, request);
  EXPECT_EQ(first.status, status) << first.body;
  EXPECT_EQ(problem_type(first), "https://idemproxy.dev/problems/" + type);
  const auto retry = w.send(codec, request);
  EXPECT_EQ(retry.status, 409) << retry.body;
  EXPECT_EQ(problem_type(retry), "https://idemproxy.dev/problems/outcome-indeterminate");
  EXPECT_EQ(w.executions(key), 1);
}

// The upstream answers the big requests after their heads, and the rest whole.
bool big(const StringRequest& head) {
  return head[bhttp::field::content_length].size() > 6;  // a million bytes or more
}

UpstreamAnswer early_id(const StringRequest&) {
  UpstreamAnswer a;
  a.body = R"({"id":"early"})";
  return a;
}

class EarlyAnswer : public ::testing::TestWithParam<Codec> {
 protected:
  World world{kConfig};
};

TEST_P(EarlyAnswer, AKeyedRequestTheUpstreamAnsweredBeforeItsBodyRunsOnceAndIsReplayed) {
  world.answer_heads = big;
  world.answer = early_id;
  auto request = json_post("early-1");
  request.body = big_body();
  const auto first = world.send(GetParam(), request);
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.body, R"({"id":"early"})");
  const auto retry = world.send(GetParam(), request);
  EXPECT_EQ(retry.status, 201) << retry.body;
  EXPECT_EQ(retry.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(retry.body, R"({"id":"early"})");
  EXPECT_EQ(world.executions("early-1"), 1);
}

TEST_P(EarlyAnswer, APassThroughRequestGetsTheUpstreamsEarlyAnswer) {
  world.answer_heads = big;
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 413;
    a.body = "too large";
    return a;
  };
  const auto reply = world.send(GetParam(), {"POST", "/uploads", {}, big_body(), {}});
  EXPECT_EQ(reply.status, 413) << reply.body;
  EXPECT_EQ(reply.body, "too large");
}

// On a kept-alive connection too. A write that failed on a reused connection before it
// ended was taken for a stale connection (the upstream closing it as it was taken) and
// the request sent again on a new one: the upstream, which had read the head and
// answered, ran it twice. It goes again only when the connection took none of it.
TEST_P(EarlyAnswer, OnAKeptAliveConnectionTheEarlyAnswerRunsOnceToo) {
  world.answer_heads = big;
  world.answer = early_id;
  EXPECT_EQ(world.send(GetParam(), json_post("small")).status, 201);  // leaves one pooled
  auto request = json_post("early-4");
  request.body = big_body();
  const auto first = world.send(GetParam(), request);
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.body, R"({"id":"early"})");
  EXPECT_EQ(world.executions("early-4"), 1);
  EXPECT_EQ(world.upstream_connections(), 1);
}

// The upstream answers after the head and keeps the connection open, the body unread:
// its answer is in the socket while the proxy's write waits for room. The write
// watches for it and stops, and the answer goes on at once (nginx reads while it
// sends). Before, the write waited out upstream.timeout: a 504 with the key left
// indeterminate, a 502 on pass-through.
TEST_P(EarlyAnswer, AnAnswerOnAConnectionTheUpstreamKeepsOpenGoesOnWithoutWaiting) {
  World open{kConfig, nullptr, "timeout: 4s"};
  open.answer_heads = big;
  open.answer = [](const StringRequest& head) {
    UpstreamAnswer a = early_id(head);
    a.keeps_open = true;
    return a;
  };
  auto request = json_post("early-5");
  request.body = big_body();
  const auto t0 = std::chrono::steady_clock::now();
  const auto first = open.send(GetParam(), request);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds{2});
  EXPECT_EQ(first.status, 201) << first.body;
  EXPECT_EQ(first.body, R"({"id":"early"})");
  const auto retry = open.send(GetParam(), request);
  EXPECT_EQ(retry.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(open.executions("early-5"), 1);
  const auto upload = open.send(GetParam(), {"POST", "/uploads", {}, big_body(), {}});
  EXPECT_EQ(upload.status, 201) << upload.body;
  EXPECT_EQ(upload.body, R"({"id":"early"})");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds{4});
}

// No answer before the reset: the request may have run (the upstream read its head),
// so its key is left indeterminate, never released for a retry to run it again.
TEST_P(EarlyAnswer, AResetWithNoAnswerAfterTheHeadWentLeavesTheKeyIndeterminate) {
  world.answer_heads = big;
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.hang_up = true;
    return a;
  };
  expect_indeterminate(world, GetParam(), "early-2", 502, "upstream-failed");
}

// An upstream that read the head and then took no more of the body (nor answered) in
// upstream.timeout: the request may have run, so the key is left indeterminate. Before,
// a write that timed out was "the request could not be sent", and the key released.
TEST_P(EarlyAnswer, AnUpstreamThatStopsTakingTheBodyLeavesTheKeyIndeterminate) {
  World slow{kConfig, nullptr, "timeout: 1s"};
  slow.answer_heads = big;
  slow.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.delay = std::chrono::seconds{3};  // after the proxy gave up
    return a;
  };
  expect_indeterminate(slow, GetParam(), "early-3", 504, "upstream-timeout");
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, EarlyAnswer, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::early_answer_test
