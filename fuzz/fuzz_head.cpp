// The HTTP/1.1 head parsers against Beast's, on any bytes made a whole head
// (head_oracle.hpp): the same refusals with the same errors, the same start line,
// fields and framing from the rest. Bytes that start as a status line does ("HTTP/")
// are an answer's head, the rest a request's. No crash, no sanitizer report.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "head_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string head = idemproxy::head_oracle::whole_head(
      std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string differs = head.starts_with("HTTP/")
                                  ? idemproxy::head_oracle::answer_difference(head)
                                  : idemproxy::head_oracle::difference(head);
  if (!differs.empty()) {
    std::fprintf(stderr, "the parsers differ:\n%s", differs.c_str());
    std::abort();
  }
  return 0;
}
