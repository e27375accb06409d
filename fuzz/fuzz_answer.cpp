// Differential: raw bytes as an HTTP/1.1 upstream's answer, through a real session,
// against an independent reading of them (answer_oracle.hpp). The client sends two
// POSTs with one new key, a GET and a HEAD on no route, on one connection; for each, the
// upstream reads the request, writes the input and closes. Properties, for any input:
// - the client reads HTTP: whole answers, the last of them perhaps broken off;
// - an answer the client reads whole is the upstream's as the oracle reads it (the
//   same status and body), or the proxy's own problem (502, 504 or 409,
//   application/problem+json): never the upstream's bytes read another way (its
//   chunks as body bytes, a body cut at a length a coding overrides);
// - so is a replay (`Idempotent-Replayed: true`; the upstream answers each execution
//   with the same bytes): never a record of an answer read another way. (The
//   upstream's own `Idempotent-Replayed`, from a dedupe of its own, is relayed.)
// - the same four requests over HTTP/2 (h2_client.hpp): nghttp2 refuses no field or
//   frame of the answers, and each that ended is as above.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "answer_oracle.hpp"
#include "h2_client.hpp"
#include "session_harness.hpp"

using namespace idemproxy::fuzz;
namespace oracle = idemproxy::answer_oracle;

namespace {

std::string answer;  // the current input: what the upstream writes for each request

// Reads one request, writes the input, and closes its writing end; reads until the
// proxy closes (a request it took whole, so the answer is not a reset).
asio::awaitable<void> upstream_connection(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  StringRequest req;
  stream.expires_after(std::chrono::seconds{5});
  auto [ec, n] = co_await bhttp::async_read(stream, buffer, req, use_nothrow);
  if (ec) co_return;
  auto [wec, w] = co_await asio::async_write(stream, asio::buffer(answer), use_nothrow);
  if (wec) co_return;
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  std::array<char, 512> drain;
  for (;;) {
    auto [rec, r] = co_await stream.async_read_some(asio::buffer(drain), use_nothrow);
    if (rec) co_return;
  }
}

struct Got {
  bool whole = false;
  unsigned status = 0;
  std::string body;
  bool replayed = false;
  bool problem = false;  // the proxy's own: a problem+json it names

  Got() = default;
  Got(unsigned status, std::string body, std::string_view content_type, bool replayed)
      : whole(true), status(status), body(std::move(body)), replayed(replayed) {
    // (An answer to HEAD has no body to name it by.)
    problem = content_type == "application/problem+json" &&
              (this->body.empty() ||
               this->body.find("\"type\":\"https://idemproxy.dev/problems/") != std::string::npos);
  }
};

void fail(const char* why, const Got& got, const oracle::Reading& read) {
  std::fprintf(stderr,
               "fuzz_answer: %s\n  client: whole=%d status=%u replayed=%d problem=%d body=[%s]\n"
               "  oracle: kind=%d status=%u body=[%s]\n",
               why, got.whole, got.status, got.replayed, got.problem, got.body.c_str(),
               static_cast<int>(read.kind), read.status, read.body.c_str());
  std::abort();
}

// A whole answer is the upstream's as the oracle reads it, or the proxy's problem.
void judge(const Got& g, const oracle::Reading& read, const char* over) {
  const bool as_read =
      read.kind == oracle::Reading::Kind::whole && g.status == read.status && g.body == read.body;
  const bool own = g.problem && (g.status == 502 || g.status == 504 || g.status == 409);
  if (as_read || own) return;
  std::fprintf(stderr, "fuzz_answer: over %s\n", over);
  fail(g.replayed ? "a replay of an answer the upstream did not give"
                  : "an answer the upstream did not give",
       g, read);
}

// The answers the client read, in order: interim answers skipped, the last perhaps
// not whole. Aborts on bytes that are not HTTP.
std::vector<Got> answers_in(std::string_view out, const std::vector<bool>& heads) {
  std::vector<Got> got;
  while (!out.empty()) {
    ResponseParser<bhttp::string_body> p;
    p.eager(true);
    p.skip(got.size() < heads.size() && heads[got.size()]);  // an answer to HEAD
    p.body_limit(out.size());
    beast::error_code ec;
    const std::size_t used = p.put(asio::buffer(out.data(), out.size()), ec);
    if (!ec && !p.is_done()) {
      // Bytes to the close: the proxy's end of the connection is the body's end.
      p.put_eof(ec);
      if (ec == bhttp::error::partial_message) ec = bhttp::error::need_more;
    }
    if (ec == bhttp::error::need_more || ec == bhttp::error::body_limit) {
      got.push_back({});  // broken off
      return got;
    }
    if (ec) {
      std::fprintf(stderr, "fuzz_answer: the client read no HTTP: %s\n", ec.message().c_str());
      std::abort();
    }
    out.remove_prefix(used);
    const auto& res = p.get();
    if (res.result_int() / 100 == 1) continue;
    got.emplace_back(res.result_int(), res.body(), res[bhttp::field::content_type],
                     res["Idempotent-Replayed"] == "true");
  }
  return got;
}

// The requests each run sends, in order: whether each is a HEAD request.
const std::vector<bool> kHeads = {false, false, false, true};

void check(const std::string& out) {
  const std::vector<Got> got = answers_in(out, kHeads);
  for (std::size_t i = 0; i < got.size() && got[i].whole; ++i) {
    judge(got[i], oracle::read(answer, i < kHeads.size() && kHeads[i]), "HTTP/1.1");
  }
}

// The same over HTTP/2: nghttp2, as a client, refuses nothing the proxy sent, and each
// answer that ended is the upstream's as the oracle reads it, or the proxy's problem.
void check_h2(const std::vector<H2Answer>& answers) {
  for (std::size_t i = 0; i < answers.size(); ++i) {
    const H2Answer& a = answers[i];
    const oracle::Reading read = oracle::read(answer, i < kHeads.size() && kHeads[i]);
    Got g(a.status, a.body, a.field("content-type"), a.field("idempotent-replayed") == "true");
    g.whole = a.ended && a.status >= 200;
    if (!a.refused.empty()) {
      std::fprintf(stderr, "fuzz_answer: nghttp2 refused: %s\n", a.refused.c_str());
      fail("an HTTP/2 answer a client must refuse", g, read);
    }
    if (g.whole) judge(g, read, "HTTP/2");
  }
}

std::uint64_t keys = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world(
      "timeout: 2s, read_timeout: 2s, max_response_size: 4KiB",
      "store: {memory: {}}\n"
      "server: {header_timeout: 2s, read_timeout: 2s, idle_timeout: 2s, body_timeout: 2s}\n"
      "routes:\n"
      "  - {name: orders, path_prefix: /v1/orders, key_required: true}\n",
      upstream_connection);
  answer.assign(reinterpret_cast<const char*>(data), size);
  const std::string key = "fuzz-answer-" + std::to_string(++keys);
  const std::string request = "POST /v1/orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: " + key +
                              "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  // And the same answer to a request on no route: relayed as it streams, unclaimed.
  // And to a HEAD request on no route, whose answer's head ends it.
  const std::string passing = "GET /other HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string heading = "HEAD /other HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string out =
      world.run(request + request + passing + heading, 0x7f030000u);  // 127.3/16
  if (std::getenv("IDEMPROXY_FUZZ_PRINT")) std::fprintf(stderr, "%s\n---\n", out.c_str());
  check(out);
  // Over HTTP/2: two POSTs with another new key, at once (the second is told the
  // first is in flight, or waits for it), and the GET.
  H2Client client;
  const std::string h2_key = key + "-h2";
  const H2Request post{"POST",
                       "/v1/orders",
                       {{"idempotency-key", h2_key}, {"content-type", "application/json"}},
                       "{}"};
  const std::string opened =
      client.open({post, post, {"GET", "/other", {}, ""}, {"HEAD", "/other", {}, ""}});
  const std::string h2_out = world.run(opened, 0x7f040000u);  // 127.4/16
  const std::vector<H2Answer> h2_answers = client.read(h2_out);
  if (std::getenv("IDEMPROXY_FUZZ_PRINT")) {
    for (const auto& a : h2_answers) {
      for (const auto& [n, v] : a.fields) std::fprintf(stderr, "  %s: %s\n", n.c_str(), v.c_str());
      std::fprintf(stderr, "h2: status=%u ended=%d reset=%u body=[%s] refused=[%s]\n", a.status,
                   a.ended, a.reset, a.body.c_str(), a.refused.c_str());
    }
  }
  check_h2(h2_answers);
  return 0;
}
