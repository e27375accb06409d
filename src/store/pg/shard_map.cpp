#include "store/pg/shard_map.hpp"

#include <algorithm>
#include <bit>

namespace idemproxy::store::pg {
namespace {

// lookup3's mix and final steps, as hashfn.c writes them.
void mix(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c) {
  a -= c;
  a ^= std::rotl(c, 4);
  c += b;
  b -= a;
  b ^= std::rotl(a, 6);
  a += c;
  c -= b;
  c ^= std::rotl(b, 8);
  b += a;
  a -= c;
  a ^= std::rotl(c, 16);
  c += b;
  b -= a;
  b ^= std::rotl(a, 19);
  a += c;
  c -= b;
  c ^= std::rotl(b, 4);
  b += a;
}

void final_mix(std::uint32_t& a, std::uint32_t& b, std::uint32_t& c) {
  c ^= b;
  c -= std::rotl(b, 14);
  a ^= c;
  a -= std::rotl(c, 11);
  b ^= a;
  b -= std::rotl(a, 25);
  c ^= b;
  c -= std::rotl(b, 16);
  a ^= c;
  a -= std::rotl(c, 4);
  b ^= a;
  b -= std::rotl(a, 14);
  c ^= b;
  c -= std::rotl(b, 24);
}

// The little-endian 32-bit word at `k`, whatever its alignment: hashfn.c's aligned path
// reads the same words on a little-endian machine, so one path gives its result.
std::uint32_t word(const unsigned char* k) {
  return k[0] | (std::uint32_t{k[1]} << 8) | (std::uint32_t{k[2]} << 16) |
         (std::uint32_t{k[3]} << 24);
}

}  // namespace

std::int32_t citus_hash(std::string_view text) {
  const auto* k = reinterpret_cast<const unsigned char*>(text.data());
  auto len = static_cast<std::uint32_t>(text.size());
  std::uint32_t a = 0x9e3779b9 + len + 3923095;
  std::uint32_t b = a;
  std::uint32_t c = a;
  while (len >= 12) {
    a += word(k);
    b += word(k + 4);
    c += word(k + 8);
    mix(a, b, c);
    k += 12;
    len -= 12;
  }
  // The tail: the low byte of c is left for the length, as in hashfn.c.
  switch (len) {
    case 11:
      c += std::uint32_t{k[10]} << 24;
      [[fallthrough]];
    case 10:
      c += std::uint32_t{k[9]} << 16;
      [[fallthrough]];
    case 9:
      c += std::uint32_t{k[8]} << 8;
      [[fallthrough]];
    case 8:
      b += std::uint32_t{k[7]} << 24;
      [[fallthrough]];
    case 7:
      b += std::uint32_t{k[6]} << 16;
      [[fallthrough]];
    case 6:
      b += std::uint32_t{k[5]} << 8;
      [[fallthrough]];
    case 5:
      b += k[4];
      [[fallthrough]];
    case 4:
      a += std::uint32_t{k[3]} << 24;
      [[fallthrough]];
    case 3:
      a += std::uint32_t{k[2]} << 16;
      [[fallthrough]];
    case 2:
      a += std::uint32_t{k[1]} << 8;
      [[fallthrough]];
    case 1:
      a += k[0];
      break;
    default:
      break;
  }
  final_mix(a, b, c);
  return static_cast<std::int32_t>(c);
}

ShardMap::ShardMap(std::vector<Shard> shards) : shards_(std::move(shards)) {
  std::sort(shards_.begin(), shards_.end(),
            [](const Shard& a, const Shard& b) { return a.min < b.min; });
}

int ShardMap::shard_of(std::string_view key) const {
  const std::int32_t h = citus_hash(key);
  // The first range whose max is at least h; it holds h if its min is at most h.
  const auto at = std::lower_bound(shards_.begin(), shards_.end(), h,
                                   [](const Shard& s, std::int32_t v) { return s.max < v; });
  if (at == shards_.end() || at->min > h) return -1;
  return static_cast<int>(at - shards_.begin());
}

int ShardMap::worker_of(std::string_view key) const {
  const int shard = shard_of(key);
  return shard < 0 ? -1 : shards_[static_cast<std::size_t>(shard)].worker;
}

}  // namespace idemproxy::store::pg
