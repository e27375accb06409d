#pragma once
// A client connection's arena: the memory Beast's fields take for one request (each
// field is an allocation, and so are the method, target and reason strings), kept
// for the next request on the connection, so that a connection in its steady state
// asks the heap for none (issue 26; measured in docs/PERFORMANCE.md).
#include <array>
#include <cstddef>
#include <new>
#include <type_traits>

namespace idemproxy::http {

/// Free lists of small blocks in size classes of kGrain bytes, carved from blocks of
/// kBlockSize taken from the heap when the lists run dry and returned only when the
/// arena goes. A request frees its fields into the lists and the next one takes them
/// again. Larger allocations (over kLargest bytes) go to the heap.
/// Not thread-safe: a connection's requests run one at a time (on its strand with
/// several I/O threads), and only they use its arena.
class Arena {
 public:
  static constexpr std::size_t kGrain = 32;
  static constexpr std::size_t kLargest = 512;
  static constexpr std::size_t kBlockSize = 4096;

  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    while (blocks_ != nullptr) {
      Link* next = blocks_->next;
      ::operator delete(blocks_);
      blocks_ = next;
    }
  }

  void* allocate(std::size_t bytes) {
    if (bytes > kLargest) return ::operator new(bytes);
    Link*& head = free_[size_class(bytes)];
    if (head != nullptr) {
      Link* block = head;
      head = block->next;
      return block;
    }
    const std::size_t size = (size_class(bytes) + 1) * kGrain;
    if (static_cast<std::size_t>(end_ - cursor_) < size) grow();
    void* block = cursor_;
    cursor_ += size;
    return block;
  }

  void deallocate(void* p, std::size_t bytes) noexcept {
    if (bytes > kLargest) {
      ::operator delete(p);
      return;
    }
    Link*& head = free_[size_class(bytes)];
    head = ::new (p) Link{head};
  }

  /// How many blocks the arena took from the heap (for tests and the benchmarks).
  std::size_t blocks() const { return blocks_taken_; }

 private:
  struct Link {
    Link* next;
  };
  static std::size_t size_class(std::size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kGrain; }

  // The first kGrain bytes of a block link it to the one taken before it.
  void grow() {
    auto* block = static_cast<char*>(::operator new(kBlockSize));
    blocks_ = ::new (block) Link{blocks_};
    ++blocks_taken_;
    cursor_ = block + kGrain;
    end_ = block + kBlockSize;
  }

  std::array<Link*, kLargest / kGrain> free_{};
  char* cursor_ = nullptr;
  char* end_ = nullptr;
  Link* blocks_ = nullptr;
  std::size_t blocks_taken_ = 0;
};

/// An allocator over a connection's Arena, or over the heap when made without one
/// (every message that is not a connection's). Copies of a container never share its
/// arena (select_on_container_copy_construction): a copy may outlive the connection.
/// Moving a container into one with another allocator copies its elements
/// (propagate_on_container_move_assignment is false), for the same reason; only a
/// move construction carries the arena along, within the request.
template <class T>
class ArenaAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::false_type;
  using propagate_on_container_swap = std::false_type;
  using is_always_equal = std::false_type;

  ArenaAllocator() noexcept = default;
  explicit ArenaAllocator(Arena* arena) noexcept : arena_(arena) {}
  template <class U>
  ArenaAllocator(const ArenaAllocator<U>& other) noexcept  // NOLINT: rebinding converts
      : arena_(other.arena()) {}

  T* allocate(std::size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "the arena aligns to max_align_t");
    const std::size_t bytes = n * sizeof(T);
    return static_cast<T*>(arena_ != nullptr ? arena_->allocate(bytes) : ::operator new(bytes));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (arena_ != nullptr) {
      arena_->deallocate(p, n * sizeof(T));
    } else {
      ::operator delete(p);
    }
  }

  ArenaAllocator select_on_container_copy_construction() const { return ArenaAllocator{}; }
  Arena* arena() const { return arena_; }

  template <class U>
  bool operator==(const ArenaAllocator<U>& other) const noexcept {
    return arena_ == other.arena();
  }

 private:
  Arena* arena_ = nullptr;
};

}  // namespace idemproxy::http
