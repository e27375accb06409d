// Garbage collection in bounded batches: the in-process GC (server.cpp) and
// `idemproxy gc` share it.
#include "idemproxy/ops/gc.hpp"

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
  return c;
}

}  // namespace idemproxy::ops
