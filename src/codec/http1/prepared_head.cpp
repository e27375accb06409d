#include "codec/http1/prepared_head.hpp"

#include "http/head_bytes.hpp"

namespace idemproxy::codec::http1 {

std::string prepared_head(unsigned status, std::span<const Header> fields, std::size_t body_size,
                          bool has_trailers) {
  if (status / 100 == 1 || status == 204 || status == 304 || has_trailers) return {};
  ResponseHeader head;
  head.result(status);
  head.version(11);
  for (const auto& f : fields) head.insert(f.name, f.value);
  head.set(bhttp::field::content_length, std::to_string(body_size));
  const HeadBytes bytes = http::serialize_head(head);
  return {bytes.data(), bytes.size() - 2};  // the blank line: per-request lines go before it
}

}  // namespace idemproxy::codec::http1
