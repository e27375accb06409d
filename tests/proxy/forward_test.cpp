// What a request's head becomes on its way upstream (prepare_forward), field by field:
// its hop-by-hop fields and Expect gone, X-Forwarded-For extended or started,
// X-Forwarded-Proto and -Host added unless the client sent them, and Host made from
// the upstream's authority when an HTTP/1.0 client sent none; and the IMF-fixdate of
// Idempotency-Key-Expires (http_date).
#include "proxy/forward.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "fakes.hpp"

namespace idemproxy::proxy {
namespace {

config::UpstreamConfig upstream() {
  config::UpstreamConfig u;
  u.host = "backend";
  u.port = "8080";
  return u;
}

// What the upstream gets: the head's fields, then those the proxy added beside it.
struct Forwarded {
  RequestHeader head;
  http::ExtraFields extra;

  std::vector<std::string> values(std::string_view name) const {
    std::vector<std::string> out;
    for (const auto& f : head)
      if (same_name(f.name_string(), name)) out.emplace_back(f.value());
    for (const auto& f : extra)
      if (same_name(f.name, name)) out.emplace_back(f.value);
    return out;
  }
  std::size_t count(std::string_view name) const { return values(name).size(); }
  std::string joined(std::string_view name) const {
    std::string out;
    for (const auto& v : values(name)) out += (out.empty() ? "" : ", ") + v;
    return out;
  }
};

RequestHeader head_of(const std::vector<std::pair<std::string, std::string>>& fields) {
  RequestHeader head;
  for (const auto& [name, value] : fields) head.insert(name, value);
  return head;
}

TEST(PrepareForward, AddsTheForwardedFieldsAClientDidNotSendAndDropsExpect) {
  Forwarded out{head_of({{"Host", "shop.example"}, {"Expect", "100-continue"}, {"TE", "trailers"}}),
                {}};
  const Peer peer{"192.0.2.7", "", true};
  EXPECT_TRUE(prepare_forward(out.head, out.extra, peer, upstream()));
  EXPECT_EQ(out.count("Expect"), 0U);
  EXPECT_EQ(out.count("TE"), 0U);
  EXPECT_EQ(out.joined("X-Forwarded-For"), "192.0.2.7");
  EXPECT_EQ(out.joined("X-Forwarded-Proto"), "https");
  EXPECT_EQ(out.joined("X-Forwarded-Host"), "shop.example");
  EXPECT_EQ(out.joined("Host"), "shop.example");
  EXPECT_EQ(out.count("X-Forwarded-For"), 1U);
  // The head's own fields first, the added ones after, as HTTP/1.1 writes them.
  out.head.method(bhttp::verb::get);
  out.head.target("/v1/orders");
  const http::HeadBytes bytes = http::serialize_head(out.head, out.extra.fields());
  EXPECT_EQ(std::string_view(bytes),
            "GET /v1/orders HTTP/1.1\r\nHost: shop.example\r\nX-Forwarded-For: 192.0.2.7\r\n"
            "X-Forwarded-Proto: https\r\nX-Forwarded-Host: shop.example\r\n\r\n");
}

TEST(PrepareForward, ExtendsEveryForwardedForLineAndKeepsWhatTheClientSaidOfProtoAndHost) {
  Forwarded out{head_of({{"x-forwarded-for", "203.0.113.1"},
                         {"X-Forwarded-For", " 203.0.113.2 "},
                         {"X-FORWARDED-PROTO", "https"},
                         {"X-Forwarded-Host", "edge.example"}}),
                {}};
  out.head.version(10);
  const Peer peer{"192.0.2.7", "", false};
  EXPECT_FALSE(prepare_forward(out.head, out.extra, peer, upstream()));
  EXPECT_EQ(out.count("X-Forwarded-For"), 1U);
  EXPECT_EQ(out.joined("X-Forwarded-For"), "203.0.113.1, 203.0.113.2, 192.0.2.7");
  EXPECT_EQ(out.joined("X-Forwarded-Proto"), "https");
  EXPECT_EQ(out.joined("X-Forwarded-Host"), "edge.example");
  EXPECT_EQ(out.joined("Host"), "backend:8080");  // HTTP/1.0 without Host
  EXPECT_EQ(out.head.version(), 11);
}

// frame_request: the framing forwarded is the codec's reading, never the sender's text
// (a length declared twice, or both fields, as a smuggler sends them).
TEST(FrameRequest, ADeclaredLengthGoesAsOneContentLengthAndNothingElseOfTheSenders) {
  testing::Log log;
  testing::FakeExchange from(log, {"abc"});
  from.request(nullptr, "/v1/orders", {});
  Forwarded out{head_of({{"Content-Length", "3, 3"},
                         {"X-Before", "1"},
                         {"transfer-encoding", "chunked"},
                         {"content-length", "3"},
                         {"X-After", "2"}}),
                {}};
  frame_request(out.head, out.extra, from);
  EXPECT_EQ(out.joined("Content-Length"), "3");
  EXPECT_EQ(out.count("Content-Length"), 1U);
  EXPECT_EQ(out.count("Transfer-Encoding"), 0U);
  EXPECT_EQ(out.joined("X-Before") + out.joined("X-After"), "12");
}

TEST(FrameRequest, ABodyOfUnknownLengthGoesChunkedAfterTheSendersOtherCodings) {
  testing::Log log;
  testing::FakeExchange from(log, {"abc"});
  from.request(nullptr, "/v1/orders", {});
  from.unknown_length();
  Forwarded out{head_of({{"Transfer-Encoding", "gzip, chunked"}, {"Content-Length", "5"}}), {}};
  frame_request(out.head, out.extra, from);
  EXPECT_EQ(out.count("Transfer-Encoding"), 1U);
  EXPECT_EQ(out.joined("Transfer-Encoding"), "gzip, chunked");
  EXPECT_EQ(out.count("Content-Length"), 0U);
  Forwarded plain{head_of({{"Transfer-Encoding", "chunked"}}), {}};
  frame_request(plain.head, plain.extra, from);
  EXPECT_EQ(plain.joined("Transfer-Encoding"), "chunked");
}

// frame_whole: a body read whole goes with one Content-Length of its size, as Beast's
// prepare_payload frames it; a head framed so already is left as it is, in its order.
std::vector<std::string> lines(const StringRequest& req) {
  std::vector<std::string> out;
  for (const auto& f : req)
    out.push_back(std::string(f.name_string()) + ": " + std::string(f.value()));
  return out;
}

StringRequest whole(bhttp::verb method, std::string body,
                    const std::vector<std::pair<std::string, std::string>>& fields) {
  StringRequest req;
  req.method(method);
  for (const auto& [name, value] : fields) req.insert(name, value);
  req.body() = std::move(body);
  return req;
}

TEST(FrameWhole, AHeadFramedAlreadyIsLeftInItsOrderAndAnyOtherIsFramedByTheBody) {
  StringRequest framed =
      whole(bhttp::verb::post, "abc", {{"Content-Length", "3"}, {"X-After", "1"}});
  frame_whole(framed);
  EXPECT_EQ(lines(framed), (std::vector<std::string>{"Content-Length: 3", "X-After: 1"}));
  StringRequest chunked =
      whole(bhttp::verb::post, "abc", {{"Transfer-Encoding", "chunked"}, {"X-After", "1"}});
  frame_whole(chunked);
  EXPECT_EQ(lines(chunked), (std::vector<std::string>{"X-After: 1", "Content-Length: 3"}));
  StringRequest listed =
      whole(bhttp::verb::put, "abc", {{"Content-Length", "3, 3"}, {"X-After", "1"}});
  frame_whole(listed);
  EXPECT_EQ(lines(listed), (std::vector<std::string>{"X-After: 1", "Content-Length: 3"}));
  StringRequest empty = whole(bhttp::verb::post, "", {});
  frame_whole(empty);
  EXPECT_EQ(lines(empty), (std::vector<std::string>{"Content-Length: 0"}));
  StringRequest get = whole(bhttp::verb::get, "", {{"X-After", "1"}});
  frame_whole(get);
  EXPECT_EQ(lines(get), (std::vector<std::string>{"X-After: 1"}));
}

// Codings besides chunked stay on the body the proxy holds, so it goes chunked with
// them and no length: before, the length was added beside what chunked's removal left
// of the first field ("gzip"), two framings (fuzz/regressions/forward).
TEST(FrameWhole, ABodyInOtherCodingsGoesChunkedWithThemAndNoLength) {
  StringRequest listed =
      whole(bhttp::verb::post, "abc", {{"Transfer-Encoding", "gzip, chunked"}, {"X-After", "1"}});
  frame_whole(listed);
  EXPECT_EQ(lines(listed),
            (std::vector<std::string>{"X-After: 1", "Transfer-Encoding: gzip, chunked"}));
  StringRequest split = whole(bhttp::verb::post, "abc",
                              {{"Transfer-Encoding", "chunke k1"},
                               {"Content-Length", "3"},
                               {"Transfer-Encoding", "chunked"}});
  frame_whole(split);
  EXPECT_EQ(lines(split), (std::vector<std::string>{"Transfer-Encoding: chunke, chunked"}));
  // An empty body has nothing coded: it goes with a length, and no coding.
  StringRequest empty = whole(bhttp::verb::post, "",
                              {{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}});
  frame_whole(empty);
  EXPECT_EQ(lines(empty), (std::vector<std::string>{"Content-Length: 0"}));
}

TimePoint at_seconds(std::int64_t secs) { return TimePoint{std::chrono::seconds{secs}}; }

TEST(HttpDate, IsTheImfFixdateOfRfc9110) {
  EXPECT_EQ(http_date(at_seconds(784111777)), "Sun, 06 Nov 1994 08:49:37 GMT");  // its example
  EXPECT_EQ(http_date(at_seconds(0)), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(http_date(at_seconds(951782400)), "Tue, 29 Feb 2000 00:00:00 GMT");
  EXPECT_EQ(http_date(at_seconds(4102444799)), "Thu, 31 Dec 2099 23:59:59 GMT");
  // A fraction of a second is dropped, before 1970 too (floor, not toward zero).
  EXPECT_EQ(http_date(at_seconds(784111777) + std::chrono::milliseconds(999)),
            "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(http_date(at_seconds(0) - std::chrono::milliseconds(1)),
            "Wed, 31 Dec 1969 23:59:59 GMT");
}

TEST(HttpDate, AgreesWithTheCLibraryAcrossTwoCenturies) {
  // Every 7 days, 3 hours, 17 minutes and 31 seconds from 1901 to 2100: each weekday,
  // month, leap year and hour the calendar has.
  for (std::int64_t s = -2'145'916'800; s < 4'102'444'800;
       s += 7 * 86'400 + 3 * 3'600 + 17 * 60 + 31) {
    const std::time_t t = static_cast<std::time_t>(s);
    std::tm tm{};
    ASSERT_NE(gmtime_r(&t, &tm), nullptr);
    char want[64];
    ASSERT_GT(std::strftime(want, sizeof want, "%a, %d %b %Y %H:%M:%S GMT", &tm), 0U);
    ASSERT_EQ(http_date(at_seconds(s)), want) << s;
  }
}

}  // namespace
}  // namespace idemproxy::proxy
