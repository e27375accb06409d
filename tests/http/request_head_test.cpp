// The HTTP/1.1 request head parser (codec/http1/request_head.hpp): what it reads and
// refuses, and, on named heads and on thousands of mutated ones, that it agrees with
// Beast's request parser, which it replaced (fuzz/head_oracle.hpp; fuzz_head runs the
// same comparison under libFuzzer).
#include <gtest/gtest.h>

#include "../../fuzz/head_oracle.hpp"

namespace idemproxy::codec::http1 {
namespace {

namespace oracle = head_oracle;

struct Parsed {
  beast::error_code ec;
  http::RequestHeader head;
  HeadFacts facts;
};

Parsed parse(std::string_view bytes) {
  Parsed p;
  p.ec = parse_request_head(bytes, p.head, p.facts);
  return p;
}

TEST(RequestHead, ReadsTheRequestLineFieldsAndFraming) {
  const auto p = parse(
      "POST /v1/orders?x=1 HTTP/1.1\r\nHost: api.example\r\nIdempotency-Key:  order-1 \t\r\n"
      "X-Empty:\r\nContent-Length: 2\r\nhost: again\r\n\r\n");
  ASSERT_FALSE(p.ec) << p.ec.message();
  EXPECT_EQ(p.head.method(), bhttp::verb::post);
  EXPECT_EQ(p.head.target(), "/v1/orders?x=1");
  EXPECT_EQ(p.head.version(), 11u);
  EXPECT_EQ(p.head["Idempotency-Key"], "order-1");  // OWS trimmed both sides
  EXPECT_EQ(p.head["X-Empty"], "");
  EXPECT_EQ(p.facts.fields, 5u);
  EXPECT_EQ(p.facts.hosts, 2u);
  EXPECT_EQ(p.facts.host, "api.example");  // the first
  EXPECT_EQ(p.facts.content_length, 2u);
  EXPECT_EQ(p.facts.lengths, 1u);
  EXPECT_FALSE(p.facts.chunked);
  EXPECT_TRUE(p.facts.keep_alive);
}

TEST(RequestHead, AnUnknownMethodKeepsItsName) {
  const auto p = parse("BREW /pot HTTP/1.0\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_EQ(p.head.method(), bhttp::verb::unknown);
  EXPECT_EQ(p.head.method_string(), "BREW");
  EXPECT_EQ(p.facts.version, 10u);
  EXPECT_FALSE(p.facts.keep_alive);  // HTTP/1.0 without keep-alive
}

TEST(RequestHead, FramingAndConnectionFields) {
  auto p = parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_TRUE(p.facts.chunked);
  EXPECT_EQ(p.facts.encodings, 1u);
  p = parse("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_FALSE(p.facts.chunked);  // chunked not last: the exchange refuses it
  // A length past any body limit is the route's to refuse (413), not the parser's.
  const std::string large = "PUT * HTTP/1.1\r\nhost:\r\nContent-Length: 70000000000000000\r\n\r\n";
  p = parse(large);
  ASSERT_FALSE(p.ec);
  EXPECT_EQ(p.facts.content_length, 70000000000000000u);
  EXPECT_EQ(oracle::difference(large), "");  // found by fuzz_head: Beast's default 1 MiB limit
  p = parse("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 7, 7\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_EQ(p.facts.content_length, 7u);
  // Every Connection field counts, not only the first.
  p = parse("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_FALSE(p.facts.keep_alive);
  p = parse("GET / HTTP/1.0\r\nConnection: Upgrade, Keep-Alive\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_TRUE(p.facts.keep_alive);
  p = parse("GET / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nTE: trailers\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_EQ(p.facts.expect, "100-continue");
  EXPECT_EQ(p.facts.te, "trailers");
}

// RFC 9112 6.1: Transfer-Encoding is a list of codings. Beast's parser read `chunke k1`
// as `chunke` and dropped the rest, so with a second field naming chunked the body was
// chunked and the first field's value half read (found by fuzz_forward).
TEST(RequestHead, ATransferEncodingThatIsNotAListOfCodingsIsRefused) {
  for (const char* value : {"chunke k1", "gzip chunked", "chunked;q=1", "gzip;level=1, chunked",
                            "\"chunked\"", "chunked,,x y"}) {
    const std::string head = std::string("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ") +
                             value + "\r\nTransfer-Encoding: chunked\r\n\r\n";
    const auto p = parse(head);
    EXPECT_EQ(p.ec, bhttp::error::bad_transfer_encoding) << value;
    EXPECT_EQ(oracle::difference(head), "") << value;
  }
  // Lists of tokens, empty elements and whitespace around commas included (RFC 9110
  // 5.6.1), are read as before.
  for (const char* value :
       {"gzip, chunked", "gzip,chunked", ", chunked", "gzip ,, chunked", "CHUNKED"}) {
    const std::string head =
        std::string("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ") + value + "\r\n\r\n";
    const auto p = parse(head);
    ASSERT_FALSE(p.ec) << value << ": " << p.ec.message();
    EXPECT_TRUE(p.facts.chunked) << value;
    EXPECT_EQ(oracle::difference(head), "") << value;
  }
}

TEST(RequestHead, RefusesWhatBeastRefusesWithBeastsErrors) {
  using E = bhttp::error;
  const std::map<std::string, E> refused{
      {" GET / HTTP/1.1\r\n\r\n", E::bad_method},
      {"GET  / HTTP/1.1\r\n\r\n", E::bad_target},
      {"G(T / HTTP/1.1\r\n\r\n", E::bad_method},
      {"GET /a\x7f HTTP/1.1\r\n\r\n", E::bad_target},
      {"GET / HTTP/1.2\r\n\r\n", E::bad_version},
      {"GET / http/1.1\r\n\r\n", E::bad_version},
      {"GET / HTTP/1.1 \r\n\r\n", E::bad_version},
      {"GET / HTTP/1.1\r\nHost : h\r\n\r\n", E::bad_field},
      {"GET / HTTP/1.1\r\n: h\r\n\r\n", E::bad_field},
      {"GET / HTTP/1.1\r\nA\"b: h\r\n\r\n", E::bad_field},
      {"GET / HTTP/1.1\r\nHost: h\x7f\r\n\r\n", E::bad_value},
      {std::string("GET / HTTP/1.1\r\nHost: h\0i\r\n\r\n", 29), E::bad_value},
      {"GET / HTTP/1.1\r\nHost: h\ni: j\r\n\r\n", E::bad_value},
      {"GET / HTTP/1.1\r\nHost: h\rX\r\n\r\n", E::bad_line_ending},
      {"GET / HTTP/1.1\r\nHost: h\r\n\rX\r\n\r\n", E::bad_line_ending},
      {"GET / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", E::bad_content_length},
      {"GET / HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", E::bad_content_length},
      {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       E::multiple_content_length},
      {"GET / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n", E::multiple_content_length},
      {"GET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       E::bad_transfer_encoding},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
       E::bad_content_length},
      {"GET / HTTP/1.1\r\nConnection: ,,close,\x01\r\n\r\n", E::bad_value},
      {"GET / HTTP/1.1\r\nConnection: a b\r\n\r\n", E::bad_value},
  };
  for (const auto& [head, error] : refused) {
    SCOPED_TRACE(head);
    EXPECT_EQ(parse(head).ec, error);
    EXPECT_EQ(oracle::difference(head), "");
  }
}

TEST(RequestHead, RefusesObsoleteLineFoldingThatBeastWouldFold) {
  const std::string head = "GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n two\r\n\r\n";
  EXPECT_TRUE(parse(head).ec);
  http::RequestParser<bhttp::empty_body> beast_parser;
  beast::error_code ec;
  beast_parser.put(asio::buffer(head), ec);
  EXPECT_FALSE(ec);  // the difference the exchange names as obsolete line folding
  EXPECT_EQ(oracle::difference(head), "");
}

TEST(RequestHead, ABytesWithoutTheirBlankLineAreRefused) {
  EXPECT_EQ(parse("GET / HTTP/1.1\r\nHost: h\r\n").ec, bhttp::error::need_more);
  EXPECT_EQ(parse("").ec, bhttp::error::need_more);
}

// Mutations of realistic heads (bytes replaced, inserted and removed, biased to the
// characters a parser decides on), each compared with Beast's parse.
TEST(RequestHead, AgreesWithBeastOnMutatedHeads) {
  const std::vector<std::string> seeds{
      "POST /v1/orders HTTP/1.1\r\nHost: api.example:8080\r\nIdempotency-Key: order-1\r\n"
      "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n",
      "POST /v1/pay HTTP/1.1\r\nhost: h\r\nTransfer-Encoding: gzip, chunked\r\nTE: trailers\r\n"
      "Expect: 100-continue\r\nConnection: keep-alive, close\r\n\r\n",
      "GET /a?b=c HTTP/1.0\r\nConnection: keep-alive\r\nX-Empty:\r\nX-Pad: \t v \t\r\n\r\n",
      "PUT * HTTP/1.1\r\nHost: h\r\nContent-Length: 7, 7\r\nProxy-Connection: close\r\n"
      "X-Obs: a\xff\x80z\r\nUpgrade: h2c\r\n\r\n",
  };
  const auto tally = oracle::tally_mutations(seeds, 20261204, 100000, oracle::difference,
                                             [](std::string_view head) { return parse(head).ec; });
  ASSERT_EQ(tally.differs, "");
  // The mutations reach both sides, and most of the ways to refuse.
  EXPECT_GT(tally.accepted, 2000u);
  EXPECT_GE(tally.errors.size(), 8u);
}

}  // namespace
}  // namespace idemproxy::codec::http1
