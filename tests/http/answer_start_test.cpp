// The start of an answer an HTTP/1.1 upstream sent before it took the whole request
// (codec/http1/answer_start.hpp): a final answer stops the request's write; interim
// answers, whole or in part, do not.
#include "codec/http1/answer_start.hpp"

#include <gtest/gtest.h>

namespace idemproxy::codec::http1 {
namespace {

TEST(AnswerStart, AFinalStatusLineBeginsTheAnswer) {
  EXPECT_TRUE(final_answer_begins("HTTP/1.1 413 Content Too Large\r\n"));
  EXPECT_TRUE(final_answer_begins("HTTP/1.1 2"));
  EXPECT_TRUE(final_answer_begins("HTTP/1.0 500 "));
}

TEST(AnswerStart, NothingOrWhatMayStillBeAnInterimAnswerDoesNot) {
  EXPECT_FALSE(final_answer_begins(""));
  EXPECT_FALSE(final_answer_begins("H"));
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 "));
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 1"));
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 100 Continue\r\n"));  // its head goes on
}

TEST(AnswerStart, WholeInterimAnswersArePassedOver) {
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 100 Continue\r\n\r\n"));
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n"));
  EXPECT_FALSE(final_answer_begins("HTTP/1.1 100 Continue\r\n\r\nHTTP/1."));
  EXPECT_TRUE(final_answer_begins("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\n"));
  EXPECT_TRUE(final_answer_begins("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 4"));
}

TEST(AnswerStart, BytesThatAreNoStatusLineBeginOneTheReadWillRefuse) {
  EXPECT_TRUE(final_answer_begins("garbage"));
  EXPECT_TRUE(final_answer_begins("HTTP/2.0 200"));
  EXPECT_TRUE(final_answer_begins("HTTP/1.x 100"));
  EXPECT_TRUE(final_answer_begins("HTTP/1.1 100 Continue\r\n\r\n\x16\x03"));
}

}  // namespace
}  // namespace idemproxy::codec::http1
