// Garbage collection in bounded batches: the in-process GC (server.cpp) and
// `idemproxy gc` share it.
#include "idemproxy/ops/gc.hpp"

#include <algorithm>

namespace idemproxy::ops {

Collected collect_expired(store::Maintenance& store, int batch_size, int max_batches,
                          const std::vector<TombstoneRoute>& tombstones) {
  Collected c;
  for (int batch = 0; batch < max_batches; ++batch) {
    auto n = store.delete_expired(batch_size);
    if (!n.ok()) {
      c.error = n.error().detail;
      return c;
    }
    c.deleted += n.value();
    if (n.value() < batch_size) break;
  }
  for (const auto& route : tombstones) {
    for (int batch = 0; batch < max_batches; ++batch) {
      auto n = store.drop_answers(route.name, route.ttl, batch_size);
      if (!n.ok()) {
        c.error = n.error().detail;
        return c;
      }
      c.tombstoned += n.value();
      if (n.value() < batch_size) break;
    }
  }
  // One page per collection, however many batches ran: its cost does not grow with
  // the records deleted, nor with the chunks stored.
  const auto swept = store.sweep_chunks(kSweepPages * std::max(batch_size, 1));
  if (!swept.ok()) {
    c.error = swept.error().detail;
    return c;
  }
  c.swept = swept.value();
  return c;
}

}  // namespace idemproxy::ops
