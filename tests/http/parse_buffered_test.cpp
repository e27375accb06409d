// parse_buffered (issue 26): the first step of Beast's read_some, made in place.
#include "http/parse_buffered.hpp"

#include <gtest/gtest.h>

#include <string_view>

using namespace idemproxy::http;

namespace {

beast::flat_buffer holding(std::string_view bytes) {
  beast::flat_buffer b;
  beast::ostream(b) << bytes;
  return b;
}

std::string_view rest(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

}  // namespace

TEST(ParseBuffered, AWholeHeadIsParsedAndWhatFollowsItStaysBuffered) {
  auto buffer = holding("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET /b");
  RequestParser<bhttp::string_body> p;
  p.eager(false);
  beast::error_code ec;
  EXPECT_TRUE(parse_buffered(buffer, p, ec));
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.is_header_done());
  EXPECT_EQ(rest(buffer), "{}GET /b");  // the body is not parsed with eager(false)
  p.eager(true);
  EXPECT_TRUE(parse_buffered(buffer, p, ec));
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(p.get().body(), "{}");
  EXPECT_EQ(rest(buffer), "GET /b");  // a pipelined request's bytes are left alone
  // A finished parser is not fed again: the caller reads (or serves the next one).
  EXPECT_FALSE(parse_buffered(buffer, p, ec));
  EXPECT_EQ(rest(buffer), "GET /b");
}

TEST(ParseBuffered, APartialHeadAsksForAReadAndLosesNothing) {
  auto buffer = holding("GET / HTTP/1.1\r\nHost: x\r\n");
  RequestParser<bhttp::empty_body> p;
  p.eager(false);
  beast::error_code ec;
  EXPECT_FALSE(parse_buffered(buffer, p, ec));
  EXPECT_FALSE(ec);
  EXPECT_FALSE(p.is_header_done());
  // What Beast's read does next: more bytes, and the parse picks up where it stopped.
  beast::ostream(buffer) << "\r\n";
  EXPECT_TRUE(parse_buffered(buffer, p, ec));
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(p.get()[bhttp::field::host], "x");
}

TEST(ParseBuffered, AnEmptyBufferAsksForARead) {
  beast::flat_buffer buffer;
  RequestParser<bhttp::empty_body> p;
  beast::error_code ec;
  EXPECT_FALSE(parse_buffered(buffer, p, ec));
  EXPECT_FALSE(ec);
}

TEST(ParseBuffered, ParserErrorsAreBeastsOwn) {
  auto buffer = holding("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\n");
  RequestParser<bhttp::empty_body> p;
  beast::error_code ec;
  EXPECT_TRUE(parse_buffered(buffer, p, ec));
  // Two lengths in one field: refused by Beast's parser, with its own error.
  EXPECT_TRUE(ec);
  EXPECT_EQ(&ec.category(), &bhttp::make_error_code(bhttp::error::bad_content_length).category());

  auto big = holding("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  RequestParser<bhttp::string_body> limited;
  limited.body_limit(4);
  limited.eager(true);
  EXPECT_TRUE(parse_buffered(big, limited, ec));
  EXPECT_EQ(ec, bhttp::error::body_limit);
}

TEST(ParseBuffered, AChunkedBodyGoesOneStepPerCallAsBeastsReadSomeDoes) {
  auto buffer = holding(
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
      "2\r\nab\r\n0\r\n\r\n");
  RequestParser<bhttp::string_body> p;  // eager(false), as the relay's parser
  beast::error_code ec;
  int steps = 0;
  while (!p.is_done() && parse_buffered(buffer, p, ec) && !ec) ++steps;
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(p.get().body(), "ab");
  EXPECT_GT(steps, 2);  // the head, then the chunks one at a time
  EXPECT_EQ(buffer.size(), 0U);
}
