#include "alloc_counter.hpp"

#include <cstdlib>
#include <new>

namespace {

thread_local bool t_counting = false;
thread_local std::size_t t_count = 0;

void* allocate(std::size_t n) {
  if (t_counting) ++t_count;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace idemproxy::trace::testing {

CountAllocations::CountAllocations() {
  t_count = 0;
  t_counting = true;
}
CountAllocations::~CountAllocations() { t_counting = false; }
std::size_t CountAllocations::count() const { return t_count; }

}  // namespace idemproxy::trace::testing
