#pragma once
// A store plays every role: the request path (claims.hpp), the waiters (watches.hpp),
// the operators' views (views.hpp) and maintenance (maintenance.hpp). Code that uses
// a store takes the roles it needs; only what builds a store names this class.
#include "idemproxy/store/claims.hpp"
#include "idemproxy/store/maintenance.hpp"
#include "idemproxy/store/record.hpp"
#include "idemproxy/store/views.hpp"
#include "idemproxy/store/watches.hpp"

namespace idemproxy::store {

/// Where idempotency records live: PgStore (PostgreSQL, and Citus) and MemoryStore.
/// tests/store/store_contract.hpp states what each must do, once for all of them.
class Store : public Claims, public Watches, public Views, public Maintenance {};

}  // namespace idemproxy::store
