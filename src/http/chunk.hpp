#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <vector>

namespace idemproxy::http {

/// A 64 KiB buffer for relaying a body, from a free list of the running thread.
/// 64 KiB, the room a body is read into (kBodyReadSize): with 16 KiB a 1 MiB answer
/// went out in 64 writes, and a body up to 64 KiB now goes out with its head in one
/// gathered write. Measured alternately against 16 KiB (bench/ab.sh, 5 rounds): 1 MiB
/// answers 1.99x the rate at 0.38x the CPU per request, 64 KiB answers 1.22x at
/// 0.74x, small ones unchanged (0.98x, within the noise).
/// Declared in a coroutine, a std::array made each coroutine frame that large an
/// allocation: a malloc and free outside glibc's per-thread cache, two per
/// pass-through request, each able to consolidate the fast bins (docs/PERFORMANCE.md).
/// A coroutine may resume on another I/O thread; its chunk then goes back to that
/// thread's list, which only that thread touches.
class Chunk {
 public:
  static constexpr std::size_t kSize = std::size_t{64} << 10;

  Chunk() : block_(take()) {
    auto& c = counts();
    c.most = std::max(c.most, ++c.held);
  }
  ~Chunk() {
    --counts().held;
    give_back(std::move(block_));
  }
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  char* data() { return block_->data(); }
  static constexpr std::size_t size() { return kSize; }

  /// The most chunks this thread held at once since reset_most_held(). A request that
  /// holds more than its answer's relay needs outruns the free list under load.
  static std::size_t most_held() { return counts().most; }
  static void reset_most_held() { counts().most = counts().held; }

 private:
  using Block = std::array<char, kSize>;
  // Blocks kept per thread: what 64 concurrent relays use, 4 MiB at most.
  static constexpr std::size_t kKept = 64;

  struct Counts {
    std::size_t held = 0;
    std::size_t most = 0;
  };
  static Counts& counts() {
    thread_local Counts c;
    return c;
  }
  static std::vector<std::unique_ptr<Block>>& spare() {
    thread_local std::vector<std::unique_ptr<Block>> blocks;
    return blocks;
  }
  static std::unique_ptr<Block> take() {
    auto& blocks = spare();
    // Not zeroed: a relay writes before it reads, and zeroing 64 KiB was 2 % of an
    // HTTP/2 pass-through request whenever more relays ran than the list keeps.
    if (blocks.empty()) return std::make_unique_for_overwrite<Block>();
    auto block = std::move(blocks.back());
    blocks.pop_back();
    return block;
  }
  static void give_back(std::unique_ptr<Block> block) {
    auto& blocks = spare();
    if (block && blocks.size() < kKept) blocks.push_back(std::move(block));
  }

  std::unique_ptr<Block> block_;
};

}  // namespace idemproxy::http
