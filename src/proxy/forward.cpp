#include "proxy/forward.hpp"

#include <chrono>
#include <optional>
#include <string_view>

#include "http/fields.hpp"

namespace idemproxy::proxy {
bool prepare_forward(RequestHeader& req, ExtraFields& extra, const Peer& peer,
                     const config::UpstreamConfig& upstream) {
  Fields& fields = req;
  // te is hop-by-hop (RFC 9110 10.1.4), but "te: trailers" is how a client says it
  // takes trailers, which a gRPC server requires: what the client said is handed to
  // the upstream's codec, which alone decides what goes on (upstream/call.hpp).
  bool te_trailers = false;
  for (const auto& f : fields) {
    if (f.name() != bhttp::field::te) continue;
    for (const auto& coding : bhttp::token_list{f.value()})
      te_trailers = te_trailers || beast::iequals(coding, "trailers");
  }
  strip_hop_by_hop(fields);
  // What the rest reads, in one walk over the fields rather than a search per name.
  bool expect = false, forwarded_for = false, forwarded_proto = false, forwarded_host = false;
  std::optional<std::string_view> host;  // the first Host's value
  for (const auto& f : fields) {
    const auto name = f.name_string();
    const auto is = [name](std::string_view n) { return same_name(name, n); };
    if (f.name() == bhttp::field::expect) {
      expect = true;
    } else if (f.name() == bhttp::field::host) {
      if (!host) host = f.value();
    } else if (is("X-Forwarded-For")) {
      forwarded_for = true;
    } else if (is("X-Forwarded-Proto")) {
      forwarded_proto = true;
    } else if (is("X-Forwarded-Host")) {
      forwarded_host = true;
    }
  }
  if (expect) fields.erase(bhttp::field::expect);  // 100-continue is answered by the proxy
  // What goes with the head is added beside it (ExtraFields), not into its tree.
  if (forwarded_for) {
    std::string xff = joined_values(fields, "X-Forwarded-For");
    xff += (xff.empty() ? "" : ", ") + peer.ip;
    fields.erase("X-Forwarded-For");
    extra.add_copy("X-Forwarded-For", xff);
  } else {
    extra.add("X-Forwarded-For", peer.ip);
  }
  if (!forwarded_proto) extra.add("X-Forwarded-Proto", peer.secure ? "https" : "http");
  // The Host field stays in the head: `host` still views its value.
  if (host && !forwarded_host) extra.add("X-Forwarded-Host", *host);
  // RFC 9112 3.2: every HTTP/1.1 request carries Host; an HTTP/1.0 client's may lack
  // it, and the upstream then gets its own authority.
  if (!host) extra.add_copy("Host", upstream.host + ":" + upstream.port);
  if (!upstream.base_path.empty()) req.target(upstream.base_path + std::string(req.target()));
  req.version(11);  // keep-alive by default: Connection was removed above
  return te_trailers;
}

void frame_request(RequestHeader& head, ExtraFields& extra, const Exchange& from) {
  std::string codings;  // transfer codings other than chunked, in order
  // One walk that reads and erases the sender's framing fields, where a search of the
  // field tree per name cost more than the walk.
  for (auto it = head.begin(); it != head.end();) {
    if (it->name() == bhttp::field::transfer_encoding) {
      append_codings_but_chunked(codings, it->value());
    } else if (it->name() != bhttp::field::content_length) {
      ++it;
      continue;
    }
    it = head.erase(it);
  }
  if (const auto length = from.content_length()) {
    extra.add_copy("Content-Length", Decimal(*length).view());
  } else if (from.has_body()) {
    if (codings.empty()) {
      extra.add("Transfer-Encoding", "chunked");
    } else {
      extra.add_copy("Transfer-Encoding", codings + ", chunked");
    }
  }
}

void frame_whole(StringRequest& req) {
  int lengths = 0;
  bool coded = false;
  std::string_view length;
  std::string codings;  // transfer codings other than chunked, in order
  for (const auto& f : req) {
    if (f.name() == bhttp::field::content_length) {
      ++lengths;
      length = f.value();
    } else if (f.name() == bhttp::field::transfer_encoding) {
      coded = true;
      append_codings_but_chunked(codings, f.value());
    }
  }
  if (coded) {
    // A body in codings besides chunked (gzip, say), which the proxy does not undo,
    // goes on chunked with them, as frame_request sends a streamed body, and never
    // with a Content-Length beside them; an empty one has nothing coded and goes as
    // any other. (prepare_payload alone took chunked out of the first field only and
    // added a length: two framings reached the upstream, found by fuzz_forward.)
    req.erase(bhttp::field::transfer_encoding);
    if (!codings.empty() && !req.body().empty()) {
      req.erase(bhttp::field::content_length);
      req.set(bhttp::field::transfer_encoding, codings + ", chunked");
      return;
    }
  }
  const Decimal size(req.body().size());
  // (Beast refuses a TRACE with a body: that is left to it.)
  if (lengths == 1 && !coded && length == size.view() && req.method() != bhttp::verb::trace) {
    return;
  }
  req.prepare_payload();
}

std::vector<Header> to_headers(const Fields& fields) {
  std::vector<Header> out;
  // One block for the list (growing it one field at a time took three or four), with
  // room for the two entries callers add (the trace's ids; Idempotent-Replayed).
  out.reserve(static_cast<std::size_t>(std::distance(fields.begin(), fields.end())) + 2);
  for (const auto& f : fields)
    out.push_back({std::string(f.name_string()), std::string(f.value())});
  return out;
}

// RFC 9110 5.6.7's IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT", laid out by hand
// from the civil calendar: gmtime_r and snprintf were 3,500 instructions a fresh key.
std::string http_date(TimePoint t) {
  namespace chr = std::chrono;
  static constexpr std::string_view kDays = "SunMonTueWedThuFriSat";
  static constexpr std::string_view kMonths = "JanFebMarAprMayJunJulAugSepOctNovDec";
  const auto secs = chr::floor<chr::seconds>(t);
  const auto day = chr::floor<chr::days>(secs);
  const chr::year_month_day date{day};
  const chr::hh_mm_ss time{secs - day};
  std::string out = "Www, DD Mmm YYYY HH:MM:SS GMT";
  const auto two = [&out](std::size_t at, unsigned v) {
    out[at] = static_cast<char>('0' + v / 10 % 10);
    out[at + 1] = static_cast<char>('0' + v % 10);
  };
  out.replace(0, 3, kDays.substr(std::size_t{chr::weekday{day}.c_encoding()} * 3, 3));
  two(5, static_cast<unsigned>(date.day()));
  out.replace(8, 3, kMonths.substr(std::size_t{static_cast<unsigned>(date.month()) - 1} * 3, 3));
  const auto year = static_cast<unsigned>(static_cast<int>(date.year()));  // 1677 to 2262
  two(12, year / 100);
  two(14, year % 100);
  two(17, static_cast<unsigned>(time.hours().count()));
  two(20, static_cast<unsigned>(time.minutes().count()));
  two(23, static_cast<unsigned>(time.seconds().count()));
  return out;
}

}  // namespace idemproxy::proxy
