#pragma once
// A move-only callable held inside its owner when it fits in N bytes, on the heap
// otherwise: std::function with room for a callback that carries a few pointers and a
// callback of its own. libstdc++'s std::function keeps only a trivially copyable
// callable of 16 bytes or less in place, so a store's callback that wraps the
// caller's (this, the request, and the caller's std::function: 48 bytes) took a heap
// block per call, made on an I/O thread and freed on the store's.
#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace idemproxy {

template <class Signature, std::size_t N>
class SmallFunction;

template <class R, class... Args, std::size_t N>
class SmallFunction<R(Args...), N> {
 public:
  SmallFunction() noexcept {}  // NOLINT(modernize-use-equals-default): a const one is usable
  // Implicit, as std::function's; the constraint keeps SmallFunction's own moves out.
  // NOLINTBEGIN(google-explicit-constructor,bugprone-forwarding-reference-overload)
  template <class F>
  requires(!std::is_same_v<std::decay_t<F>, SmallFunction> &&
           std::is_invocable_r_v<R, std::decay_t<F>&, Args...>) SmallFunction(F&& f) {
    using T = std::decay_t<F>;
    if constexpr (fits<T>) {
      ::new (static_cast<void*>(room_)) T(std::forward<F>(f));
    } else {
      *reinterpret_cast<T**>(room_) = new T(std::forward<F>(f));
    }
    ops_ = &kOps<T>;
  }
  // NOLINTEND(google-explicit-constructor,bugprone-forwarding-reference-overload)
  SmallFunction(SmallFunction&& other) noexcept { take(other); }
  SmallFunction& operator=(SmallFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  SmallFunction(const SmallFunction&) = delete;
  SmallFunction& operator=(const SmallFunction&) = delete;
  ~SmallFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  /// Calls the callable as a non-const lvalue, as std::function does.
  R operator()(Args... args) const {
    if (ops_ == nullptr) throw std::bad_function_call();
    return ops_->call(const_cast<std::byte*>(room_), std::forward<Args>(args)...);
  }

  /// Whether a callable of type T is held in place (no heap).
  template <class T>
  static constexpr bool fits =
      sizeof(T) <= N &&
      alignof(T) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<T>;

 private:
  struct Ops {
    R (*call)(std::byte* room, Args&&... args);
    void (*move)(std::byte* from, std::byte* to) noexcept;  // leaves `from` destroyed
    void (*destroy)(std::byte* room) noexcept;
  };
  template <class T>
  static T& held(std::byte* room) noexcept {
    if constexpr (fits<T>) {
      return *std::launder(reinterpret_cast<T*>(room));
    } else {
      return **reinterpret_cast<T**>(room);
    }
  }
  template <class T>
  static constexpr Ops kOps{[](std::byte* room, Args&&... args) -> R {
                              return std::invoke(held<T>(room), std::forward<Args>(args)...);
                            },
                            [](std::byte* from, std::byte* to) noexcept {
                              if constexpr (fits<T>) {
                                T& f = held<T>(from);
                                ::new (static_cast<void*>(to)) T(std::move(f));
                                f.~T();
                              } else {
                                *reinterpret_cast<T**>(to) = *reinterpret_cast<T**>(from);
                              }
                            },
                            [](std::byte* room) noexcept {
                              if constexpr (fits<T>) {
                                held<T>(room).~T();
                              } else {
                                delete *reinterpret_cast<T**>(room);
                              }
                            }};

  void take(SmallFunction& other) noexcept {
    ops_ = std::exchange(other.ops_, nullptr);
    if (ops_ != nullptr) ops_->move(other.room_, room_);
  }
  void reset() noexcept {
    if (ops_ != nullptr) std::exchange(ops_, nullptr)->destroy(room_);
  }

  static_assert(N >= sizeof(void*), "room for at least the heap's pointer");
  alignas(std::max_align_t) std::byte room_[N];
  const Ops* ops_ = nullptr;
};

}  // namespace idemproxy
