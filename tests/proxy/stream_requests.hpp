#pragma once
// Requests and streamed answers that the streaming tests share (streaming_test.cpp,
// follow_test.cpp): a keyed POST to /v1/events, an answer of server-sent events, and
// whether a reply broke off.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "world.hpp"

namespace idemproxy::testing {

inline Request keyed(std::string key) { return json_post(std::move(key), "/v1/events", "{}"); }

inline UpstreamAnswer events(std::vector<std::pair<std::chrono::milliseconds, std::string>> pieces,
                             bool cut = false) {
  UpstreamAnswer a;
  a.status = 200;
  a.fields = {{"Content-Type", "text/event-stream"}};
  a.stream = std::move(pieces);
  a.cut = cut;
  return a;
}

// A stream that broke off reaches the client as one: never as a whole answer.
inline bool broken_off(const Reply& r) { return r.closed || r.reset; }

}  // namespace idemproxy::testing
