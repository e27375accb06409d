// The end of a chunked answer's body as the proxy reads it (codec/http1/trailer_section.hpp):
// the last chunk's line, the trailer fields a trailer may carry, and the blank line.
#include "codec/http1/trailer_section.hpp"

#include <gtest/gtest.h>

#include <map>

namespace idemproxy::codec::http1 {
namespace {

struct Read {
  beast::error_code ec;
  std::vector<Header> trailers;
  std::size_t used = 0;
};

Read read(std::string_view bytes) {
  Read r;
  r.ec = parse_trailer_section(bytes, r.trailers, r.used);
  return r;
}

TEST(TrailerSection, ReadsTheLastChunkAndItsFieldsUpToTheBlankLine) {
  const std::string section = "0\r\nX-Sum: 7 \r\nServer-Timing:\tdb;dur=3\r\n\r\n";
  const auto r = read(section + "HTTP/1.1 200 OK\r\n");  // the next answer stays
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.used, section.size());
  EXPECT_EQ(r.trailers, (std::vector<Header>{{"X-Sum", "7"}, {"Server-Timing", "db;dur=3"}}));
}

TEST(TrailerSection, TheChunkBeforesEndAndTheLastChunksExtensionsAreReadPast) {
  const std::string section = "\r\n000;last=1\r\n\r\n";
  const auto r = read(section);
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.used, section.size());
  EXPECT_TRUE(r.trailers.empty());
}

// RFC 9110 6.5.1: a trailer cannot frame the message, route it, control the
// connection or say how to read the content. Beast's parser failed the answer on the
// first two (its head rules), and a `Connection: close` trailer closed the connection.
TEST(TrailerSection, FieldsATrailerMayNotCarryAreReadPast) {
  const auto r = read(
      "0\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
      "Content-Type: text/html\r\nTrailer: X-Sum\r\nX-Sum: 7\r\n\r\n");
  EXPECT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.trailers, (std::vector<Header>{{"X-Sum", "7"}}));
}

TEST(TrailerSection, AMalformedSectionIsRefusedAsBeastNamesIt) {
  const std::map<std::string, beast::error_code> cases = {
      {"0\r\nX Sum: 7\r\n\r\n", bhttp::error::bad_field},
      {"0\r\n: 7\r\n\r\n", bhttp::error::bad_field},
      {"0\r\nX-Sum: 7\r\n folded\r\n\r\n", bhttp::error::bad_field},  // obs-fold
      {"0\r\nX-Sum: a\x01z\r\n\r\n", bhttp::error::bad_value},
      {"0\r\nX-Sum: 7\rY: 8\r\n\r\n", bhttp::error::bad_line_ending},
      {"1\r\n\r\n", bhttp::error::bad_chunk},  // not the last chunk
      {"0\r\nX-Sum: 7\r\n", bhttp::error::need_more},
      {"0\r", bhttp::error::need_more},
  };
  for (const auto& [bytes, error] : cases) {
    EXPECT_EQ(read(bytes).ec, error) << bytes;
  }
}

}  // namespace
}  // namespace idemproxy::codec::http1
