#pragma once
// nghttp2's allocations (streams, frames queued, header blocks, HPACK strings) from the
// connection's arena: a warm HTTP/2 connection's streams then take nothing from the
// heap for them, as a warm HTTP/1.1 connection's requests take nothing for their
// fields. Each block carries its size before it, since nghttp2 frees without one.
#include <nghttp2/nghttp2.h>

#include <cstring>

#include "codec/http_names.hpp"
#include "http/arena.hpp"

namespace idemproxy::codec::http2 {

class SessionMemory {
 public:
  explicit SessionMemory(Arena& arena)
      : mem_{&arena, &SessionMemory::malloc, &SessionMemory::free, &SessionMemory::calloc,
             &SessionMemory::realloc} {}
  nghttp2_mem* get() { return &mem_; }

 private:
  // 16 bytes keep the block's alignment what operator new gives.
  static constexpr std::size_t kHeader = 16;

  static Arena& arena(void* user) { return *static_cast<Arena*>(user); }
  static std::size_t& size_of(void* block) {
    return *reinterpret_cast<std::size_t*>(static_cast<char*>(block) - kHeader);
  }
  static void* malloc(std::size_t size, void* user) {
    auto* raw = static_cast<char*>(arena(user).allocate(size + kHeader));
    *reinterpret_cast<std::size_t*>(raw) = size;
    return raw + kHeader;
  }
  static void free(void* block, void* user) {
    if (block == nullptr) return;
    arena(user).deallocate(static_cast<char*>(block) - kHeader, size_of(block) + kHeader);
  }
  static void* calloc(std::size_t count, std::size_t size, void* user) {
    void* block = malloc(count * size, user);
    std::memset(block, 0, count * size);
    return block;
  }
  static void* realloc(void* block, std::size_t size, void* user) {
    if (block == nullptr) return malloc(size, user);
    if (size == 0) {
      free(block, user);
      return nullptr;
    }
    const std::size_t old = size_of(block);
    if (size <= old) return block;
    void* grown = malloc(size, user);
    std::memcpy(grown, block, old);
    free(block, user);
    return grown;
  }

  nghttp2_mem mem_;
};

}  // namespace idemproxy::codec::http2
