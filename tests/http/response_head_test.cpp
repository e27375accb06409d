// The HTTP/1.1 answer head parser (codec/http1/response_head.hpp): what it reads and
// refuses, and, on named heads and on thousands of mutated ones, that it agrees with
// Beast's response parser, which it replaced (fuzz/head_oracle.hpp; fuzz_head runs the
// same comparison under libFuzzer on inputs that start "HTTP/").
#include <gtest/gtest.h>

#include "../../fuzz/head_oracle.hpp"

namespace idemproxy::codec::http1 {
namespace {

namespace oracle = head_oracle;

struct ParsedAnswer {
  beast::error_code ec;
  http::ResponseHeader head;
  AnswerFacts facts;
};

ParsedAnswer parse_answer(std::string_view bytes) {
  ParsedAnswer p;
  p.ec = parse_response_head(bytes, p.head, p.facts);
  return p;
}

TEST(ResponseHead, ReadsTheStatusLineFieldsAndFraming) {
  const auto p = parse_answer(
      "HTTP/1.1 201 Created Here \r\nContent-Type: application/json\r\n"
      "Idempotency-Policy:  max-age=60 \t\r\nX-Empty:\r\nContent-Length: 17\r\n\r\n");
  ASSERT_FALSE(p.ec) << p.ec.message();
  EXPECT_EQ(p.head.result_int(), 201u);
  EXPECT_EQ(p.facts.status, 201u);
  EXPECT_EQ(p.head.reason(), "Created Here ");  // as Beast keeps it: to the CR
  EXPECT_EQ(p.head.version(), 11u);
  EXPECT_EQ(p.head["Idempotency-Policy"], "max-age=60");  // OWS trimmed both sides
  EXPECT_EQ(p.head["X-Empty"], "");
  EXPECT_EQ(p.facts.fields, 4u);
  EXPECT_EQ(p.facts.content_length, 17u);
  EXPECT_FALSE(p.facts.chunked);
  EXPECT_TRUE(p.facts.keep_alive);
  EXPECT_TRUE(p.facts.framed_one_way());
}

TEST(ResponseHead, AnEmptyReasonAndHttp10) {
  auto p = parse_answer("HTTP/1.0 204 \r\n\r\n");
  ASSERT_FALSE(p.ec) << p.ec.message();
  EXPECT_EQ(p.head.reason(), "No Content");  // none reads as the status's own, as in Beast
  EXPECT_EQ(oracle::answer_difference("HTTP/1.0 204 \r\n\r\n"), "");
  EXPECT_EQ(p.facts.version, 10u);
  EXPECT_FALSE(p.facts.keep_alive);  // HTTP/1.0 without keep-alive
  p = parse_answer("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_TRUE(p.facts.keep_alive);
  p = parse_answer("HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n");
  ASSERT_FALSE(p.ec);
  EXPECT_FALSE(p.facts.keep_alive);  // every Connection field counts
}

// RFC 9112 6.1 and 6.3: the framing a proxy can read one way only. The parser reads
// what Beast did; the call refuses the rest of a final answer (framed_one_way).
TEST(ResponseHead, FramingReadOneWayOnly) {
  for (const char* fields : {"Transfer-Encoding: chunked\r\n", "Transfer-Encoding: , CHUNKED ,\r\n",
                             "Content-Length: 5\r\n", "Content-Length: 5, 5\r\n", ""}) {
    const auto p = parse_answer(std::string("HTTP/1.1 200 OK\r\n") + fields + "\r\n");
    ASSERT_FALSE(p.ec) << fields << p.ec.message();
    EXPECT_TRUE(p.facts.framed_one_way()) << fields;
  }
  for (const char* fields : {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding: gzip\r\n",
                             "Transfer-Encoding: chunked, chunked\r\n", "Transfer-Encoding: ,\r\n",
                             "Transfer-Encoding: gzip\r\nContent-Length: 5\r\n"}) {
    const auto p = parse_answer(std::string("HTTP/1.1 200 OK\r\n") + fields + "\r\n");
    ASSERT_FALSE(p.ec) << fields << p.ec.message();  // as Beast read them
    EXPECT_FALSE(p.facts.framed_one_way()) << fields;
  }
  // `chunked, chunked` is not chunked to Beast (its first chunked is not the last).
  EXPECT_FALSE(
      parse_answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n").facts.chunked);
}

TEST(ResponseHead, RefusesWhatBeastRefusesWithBeastsErrors) {
  using E = bhttp::error;
  const std::map<std::string, E> refused{
      {"HTTP/1.2 200 OK\r\n\r\n", E::bad_version},
      {"HTTP/2.0 200 OK\r\n\r\n", E::bad_version},
      {"http/1.1 200 OK\r\n\r\n", E::bad_version},
      {"HTTP/1.1  200 OK\r\n\r\n", E::bad_status},
      {"HTTP/1.1\r\n\r\n", E::bad_version},
      {"HTTP/1.1 20 OK\r\n\r\n", E::bad_status},
      {"HTTP/1.1 2000 OK\r\n\r\n", E::bad_status},
      {"HTTP/1.1 200\r\n\r\n", E::bad_status},
      {"HTTP/1.1 200 O\x01K\r\n\r\n", E::bad_reason},
      {"HTTP/1.1 200 O\x7fK\r\n\r\n", E::bad_reason},
      {"HTTP/1.1 200 OK\rX\r\n\r\n", E::bad_line_ending},
      {"HTTP/1.1 200 OK\r\nA b: c\r\n\r\n", E::bad_field},
      {"HTTP/1.1 200 OK\r\nA: b\x01\r\n\r\n", E::bad_value},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n", E::bad_content_length},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
       E::multiple_content_length},
      {"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
       E::bad_transfer_encoding},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
       E::bad_content_length},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
       E::bad_transfer_encoding},
      {"HTTP/1.1 200 OK\r\nConnection: a b\r\n\r\n", E::bad_value},
  };
  for (const auto& [head, error] : refused) {
    SCOPED_TRACE(head);
    EXPECT_EQ(parse_answer(head).ec, error);
    EXPECT_EQ(oracle::answer_difference(head), "");
  }
}

// RFC 9112 5.2: a proxy may answer 502 for a folded field in an answer; Beast folds it.
TEST(ResponseHead, RefusesObsoleteLineFoldingThatBeastWouldFold) {
  const std::string head = "HTTP/1.1 200 OK\r\nX-A: one\r\n two\r\n\r\n";
  EXPECT_EQ(parse_answer(head).ec, bhttp::error::bad_field);
  http::ResponseParser<bhttp::empty_body> beast_parser;
  beast::error_code ec;
  beast_parser.put(asio::buffer(head), ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(oracle::answer_difference(head), "");
}

TEST(ResponseHead, BytesWithoutTheirBlankLineAreRefused) {
  EXPECT_EQ(parse_answer("HTTP/1.1 200 OK\r\n").ec, bhttp::error::need_more);
  EXPECT_EQ(parse_answer("\r\n\r\n").ec, bhttp::error::need_more);  // Beast waits for a version
}

// Mutations of realistic answer heads, each compared with Beast's parse.
TEST(ResponseHead, AgreesWithBeastOnMutatedHeads) {
  const std::vector<std::string> seeds{
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 17\r\n"
      "Idempotency-Policy: max-age=60\r\n\r\n",
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nTrailer: X-Sum\r\n"
      "Connection: keep-alive, close\r\n\r\n",
      "HTTP/1.0 204 No Content\r\nConnection: keep-alive\r\nX-Empty:\r\nX-Pad: \t v \t\r\n\r\n",
      "HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\nContent-Length: 7, 7\r\n"
      "Proxy-Connection: close\r\nX-Obs: a\xff\x80z\r\n\r\n",
  };
  const auto tally =
      oracle::tally_mutations(seeds, 20261206, 100000, oracle::answer_difference,
                              [](std::string_view head) { return parse_answer(head).ec; });
  ASSERT_EQ(tally.differs, "");
  // The mutations reach both sides, and most of the ways to refuse.
  EXPECT_GT(tally.accepted, 2000u);
  EXPECT_GE(tally.errors.size(), 8u);
}

}  // namespace
}  // namespace idemproxy::codec::http1
