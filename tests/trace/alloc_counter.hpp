#pragma once
// Counts operator new calls on this thread while a CountAllocations is alive
// (alloc_counter.cpp replaces the global operator new for the trace_tests binary).
#include <cstddef>

namespace idemproxy::trace::testing {

class CountAllocations {
 public:
  CountAllocations();
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  std::size_t count() const;
};

}  // namespace idemproxy::trace::testing
