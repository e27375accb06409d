#pragma once
// One field of a message as a name and a value: what an answer's head and trailers
// are made of, whether it is on the wire (http/), stored (store/) or replayed. It
// sits at the bottom of the layers so that the store keeps what HTTP sends without
// either including the other; http/ names it http::Header.
#include <string>

namespace idemproxy {

struct Header {
  std::string name;
  std::string value;
  bool operator==(const Header&) const = default;
};

}  // namespace idemproxy
