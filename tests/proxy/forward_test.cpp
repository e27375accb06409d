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

std::string joined(const RequestHeader& head, std::string_view name) {
  return http::joined_values(head, name);
}

RequestHeader head_of(const std::vector<std::pair<std::string, std::string>>& fields) {
  RequestHeader head;
  for (const auto& [name, value] : fields) head.insert(name, value);
  return head;
}

TEST(PrepareForward, AddsTheForwardedFieldsAClientDidNotSendAndDropsExpect) {
  RequestHeader head =
      head_of({{"Host", "shop.example"}, {"Expect", "100-continue"}, {"TE", "trailers"}});
  EXPECT_TRUE(prepare_forward(head, {"192.0.2.7", "", true}, upstream()));
  EXPECT_EQ(head.count(bhttp::field::expect), 0U);
  EXPECT_EQ(head.count(bhttp::field::te), 0U);
  EXPECT_EQ(joined(head, "X-Forwarded-For"), "192.0.2.7");
  EXPECT_EQ(joined(head, "X-Forwarded-Proto"), "https");
  EXPECT_EQ(joined(head, "X-Forwarded-Host"), "shop.example");
  EXPECT_EQ(joined(head, "Host"), "shop.example");
  EXPECT_EQ(head.count("X-Forwarded-For"), 1U);
}

TEST(PrepareForward, ExtendsEveryForwardedForLineAndKeepsWhatTheClientSaidOfProtoAndHost) {
  RequestHeader head = head_of({{"x-forwarded-for", "203.0.113.1"},
                                {"X-Forwarded-For", " 203.0.113.2 "},
                                {"X-FORWARDED-PROTO", "https"},
                                {"X-Forwarded-Host", "edge.example"}});
  head.version(10);
  EXPECT_FALSE(prepare_forward(head, {"192.0.2.7", "", false}, upstream()));
  EXPECT_EQ(head.count("X-Forwarded-For"), 1U);
  EXPECT_EQ(joined(head, "X-Forwarded-For"), "203.0.113.1, 203.0.113.2, 192.0.2.7");
  EXPECT_EQ(joined(head, "X-Forwarded-Proto"), "https");
  EXPECT_EQ(joined(head, "X-Forwarded-Host"), "edge.example");
  EXPECT_EQ(joined(head, "Host"), "backend:8080");  // HTTP/1.0 without Host
  EXPECT_EQ(head.version(), 11);
}

// frame_request: the framing forwarded is the codec's reading, never the sender's text
// (a length declared twice, or both fields, as a smuggler sends them).
TEST(FrameRequest, ADeclaredLengthGoesAsOneContentLengthAndNothingElseOfTheSenders) {
  testing::Log log;
  testing::FakeExchange from(log, {"abc"});
  from.request(nullptr, "/v1/orders", {});
  RequestHeader head = head_of({{"Content-Length", "3, 3"},
                                {"X-Before", "1"},
                                {"transfer-encoding", "chunked"},
                                {"content-length", "3"},
                                {"X-After", "2"}});
  frame_request(head, from);
  EXPECT_EQ(joined(head, "Content-Length"), "3");
  EXPECT_EQ(head.count(bhttp::field::content_length), 1U);
  EXPECT_EQ(head.count(bhttp::field::transfer_encoding), 0U);
  EXPECT_EQ(joined(head, "X-Before") + joined(head, "X-After"), "12");
}

TEST(FrameRequest, ABodyOfUnknownLengthGoesChunkedAfterTheSendersOtherCodings) {
  testing::Log log;
  testing::FakeExchange from(log, {"abc"});
  from.request(nullptr, "/v1/orders", {});
  from.unknown_length();
  RequestHeader head = head_of({{"Transfer-Encoding", "gzip, chunked"}, {"Content-Length", "5"}});
  frame_request(head, from);
  EXPECT_EQ(head.count(bhttp::field::transfer_encoding), 1U);
  EXPECT_EQ(joined(head, "Transfer-Encoding"), "gzip, chunked");
  EXPECT_EQ(head.count(bhttp::field::content_length), 0U);
  RequestHeader plain = head_of({{"Transfer-Encoding", "chunked"}});
  frame_request(plain, from);
  EXPECT_EQ(joined(plain, "Transfer-Encoding"), "chunked");
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
