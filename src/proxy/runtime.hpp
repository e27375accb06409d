#pragma once
// What the proxy's phases share: settings (swapped on reload), the coordinator in
// front of the store, the database pool, the upstream pool, leases, metrics and the
// tracer. What only the server touches (the store in all its roles, readiness,
// reload, the exit sequence's waits) is ServerRuntime's (server/server_runtime.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "http/beast.hpp"
#include "http/settings.hpp"
#include "idemproxy/common/handoff.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "idemproxy/engine/lease_schedule.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/trace/tracer.hpp"
#include "proxy/completion_retrier.hpp"
#include "proxy/http_names.hpp"
#include "proxy/lease_renewals.hpp"
#include "proxy/live_answer.hpp"
#include "proxy/replay.hpp"
#include "upstream/pool.hpp"

namespace idemproxy::proxy {

class Runtime {
 public:
  /// `fake`: where upstream calls come from instead of the pool (tests: no sockets).
  Runtime(asio::io_context& io, std::shared_ptr<const Settings> settings, store::Store& store,
          ops::Metrics& metrics, int db_threads, upstream::Upstream* fake = nullptr)
      : record_store(store),
        metrics(metrics),
        db_pool(static_cast<std::size_t>(db_threads)),
        pool(io.get_executor(), settings->config.upstream, settings->config.server.threads > 1),
        upstream(fake != nullptr ? *fake : pool),
        completions(coordinator, store, db_pool, settings->config.server.max_unstored),
        cache(settings->config.replay_cache_bytes),
        coordinator(store, store, cache, metrics, coordinator_hooks()),
        settings_(std::move(settings)),
        io_(io),
        io_threads_(static_cast<std::size_t>(std::max(1, settings_->config.server.threads))) {}
  ~Runtime() { leave_claims_to_leases(); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  std::shared_ptr<const Settings> settings() const {
    std::lock_guard lock(mu_);
    return settings_;
  }
  /// Changes after each replacement of settings(): read it before settings()
  /// (http::Service::settings_version).
  std::uint64_t settings_version() const {
    return settings_version_.load(std::memory_order_acquire);
  }

  /// Runs a blocking call (a store call) on the database pool and resumes the
  /// calling coroutine on its own executor: libpq never blocks an I/O thread.
  // Only trivially destructible values may appear as temporaries inside a co_await
  // expression: GCC 12 destroys such temporaries twice. Hence `fn` should capture
  // by reference, and the initiation below captures only `this`.
  template <class F>
  asio::awaitable<std::invoke_result_t<F&>> blocking(F fn) {
    using R = std::invoke_result_t<F&>;
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(R)>(
        [this](auto handler, F work) {
          auto io = asio::get_associated_executor(handler);
          asio::post(db_pool, [this, handler = std::move(handler), work = std::move(work),
                               guard = asio::make_work_guard(io)]() mutable {
            const auto started = std::chrono::steady_clock::now();
            R result = work();
            metrics.observe_store(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            auto ex = guard.get_executor();
            asio::post(ex, [handler = std::move(handler), result = std::move(result)]() mutable {
              std::move(handler)(std::move(result));
            });
          });
        },
        asio::use_awaitable, std::move(fn));
  }

  /// The claim of a keyed request, answered on the calling coroutine's executor. The
  /// coordinator chooses how: a store that queues its calls (PostgreSQL's group
  /// commit) takes it from this thread and answers from its own, so no database-pool
  /// thread waits per request (that wait cost a context switch each way,
  /// docs/PERFORMANCE.md); another store's call runs on the database pool.
  asio::awaitable<engine::Admission> claim(const store::ClaimRequest& claim) {
    co_return co_await queued<engine::Admission>(
        [this, &claim](std::function<void(engine::Admission)> done) {
          coordinator.claim_async(claim, std::move(done));
        });
  }

  /// The completion of a claim with the upstream's answer, as claim() does it.
  /// `answer` and `form` are moved from: the record, the replay cache and a retry
  /// take the answer in one kept form (engine::Engine::keep).
  asio::awaitable<engine::Completion> complete(const store::ClaimRequest& claim, std::int64_t token,
                                               const engine::RoutePolicy& route,
                                               store::StoredResponse& answer,
                                               engine::ReplayCache::Request& form) {
    co_return co_await queued<engine::Completion>(
        [this, &claim, token, &route, &answer,
         &form](std::function<void(engine::Completion)> done) {
          coordinator.complete_async(claim, token, route, std::move(answer), std::move(form),
                                     std::move(done));
        });
  }

  /// Stores chunk `seq` of a streamed answer under the claim (store::Claims::append),
  /// as claim() does: through the store's own queue when it has one (PostgreSQL's
  /// chunk group commit), otherwise on the database pool. `bytes` must outlive it.
  /// The store's error, or none once the chunk is durable.
  /// `announce`: the record's watchers elsewhere are told (a retry follows the stream).
  asio::awaitable<std::optional<store::StoreError>> append(const store::RecordId& id,
                                                           std::int64_t token, std::int32_t seq,
                                                           std::string_view bytes, bool announce) {
    using Failed = std::optional<store::StoreError>;
    const auto failed = [](const store::Result<store::Done>& r) {
      return r.ok() ? Failed{} : Failed{r.error()};
    };
    co_return co_await queued<Failed>(
        [this, &id, token, seq, bytes, announce, failed](std::function<void(Failed)> done) {
          append_then(id, token, seq, bytes, announce,
                      [done = std::move(done), failed](const store::Result<store::Done>& r) {
                        done(failed(r));
                      });
        });
  }
  /// append() for a caller that is no coroutine: `done` is called on a thread of the
  /// store's, or of the database pool, never on the calling I/O thread. `id` and
  /// `bytes` are read before it returns (copied for the pool when the store blocks).
  void append_then(const store::RecordId& id, std::int64_t token, std::int32_t seq,
                   std::string_view bytes, bool announce, store::Claims::AppendDone done) {
    if (record_store.queues_calls()) {
      record_store.append_async(id, token, seq, bytes, announce, std::move(done));
      return;
    }
    asio::post(db_pool, [this, id, token, seq, bytes = std::string(bytes), announce,
                         done = std::move(done)]() mutable {
      record_store.append_async(id, token, seq, bytes, announce, std::move(done));
    });
  }
  /// Records the head of the answer the holder of `token` streams (store::Claims::
  /// start_stream), on the database pool; nobody waits for it. A retry on another
  /// instance attaches to the stream with it.
  void start_stream(const store::RecordId& id, std::int64_t token, store::StoredResponse head) {
    asio::post(db_pool, [this, id, token, head = std::move(head)] {
      const auto r = record_store.start_stream(id, token, head);
      if (!r.ok() && r.error().code != store::StoreErrc::fenced) {
        spdlog::debug("store: the head of a streamed answer was not recorded: {}",
                      r.error().detail);
      }
    });
  }

  /// Bytes of server.max_unstored for a stream's chunks held while the store fails
  /// their appends (CompletionRetrier::reserve); false when that would spend it.
  bool hold_unstored(std::size_t bytes) { return completions.reserve(bytes); }
  void release_unstored(std::size_t bytes) { completions.release(bytes); }
  /// A streamed answer's completion that the store failed under: the chunks it has
  /// not taken, then the completion, retried in the background with the `reserved`
  /// bytes; the key's waiters here look again. False: the retry budget is spent.
  bool complete_later(const store::ClaimRequest& claim, std::int64_t token,
                      const engine::RoutePolicy& route, store::StoredResponse answer,
                      std::vector<store::Chunk> unstored, std::size_t reserved) {
    const bool retrying =
        completions.retry(claim.id, token, route, engine::Engine::keep(std::move(answer), route),
                          std::move(unstored), reserved);
    coordinator.handed_off(claim.id);
    return retrying;
  }

  /// The store's read-only role: a caller's lookup of its own key (proxy/lookup.hpp).
  store::Views& views() { return record_store; }

  // Declared in the order they are built: the coordinator uses the store, the
  // database pool, the completion retrier and the cache.
 protected:
  store::Store& record_store;  // in all its roles: the server's, not the phases'

 public:
  ops::Metrics& metrics;
  asio::thread_pool db_pool;
  upstream::UpstreamPool pool;
  upstream::Upstream& upstream;  // the pool, or a fake
  engine::LeaseSchedule leases;  // renew_leases() is started with the server

 protected:
  CompletionRetrier completions;
  engine::ReplayCache cache;

 public:
  engine::Coordinator coordinator;
  /// The answers streaming from this instance, which concurrent retries attach to.
  LiveAnswers live;
  std::atomic<bool> draining{false};
  /// Whether a ClaimPermit let go without an answer abandons its claim; shared with
  /// every permit, which may outlive this runtime (frames destroyed with `io`).
  std::shared_ptr<std::atomic<bool>> abandons_allowed = std::make_shared<std::atomic<bool>>(true);
  /// Starts each request's span (src/proxy/spans.hpp); null, or off, without tracing.
  const trace::Tracer* tracer = nullptr;

 protected:
  void replace_settings(std::shared_ptr<const Settings> s) {
    std::lock_guard lock(mu_);
    settings_ = std::move(s);
    settings_version_.fetch_add(1, std::memory_order_release);
  }
  /// Past the drain: request frames still running are destroyed with their upstream
  /// exchanges possibly under way; their claims stay until their leases end.
  void leave_claims_to_leases() { abandons_allowed->store(false); }

  /// Calls `start` with a callback, which the store calls from a thread of its own or
  /// from this thread's event loop (Store::queues_calls; common::Reactor), and
  /// resumes the calling coroutine on its own executor
  /// with the value passed to it. Timed as a store call, like blocking().
  template <class R, class Start>
  asio::awaitable<R> queued(Start start) {
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable),
                                            void(std::exception_ptr, R)>(
        [this](auto handler, Start begin) {
          auto io = asio::get_associated_executor(handler);
          using Handler = decltype(handler);
          using Guard = decltype(asio::make_work_guard(io));
          // The call's one block, owned by whoever answers it: the store's callback
          // and a batch's deferred answer carry only its address, which std::function
          // keeps in place (a pointer is trivially copyable) where a shared_ptr took a
          // block of its own, and an answer posted to the caller's executor owns it.
          struct Waiting {
            Runtime* rt;
            Handler handler;
            Guard guard;
            std::chrono::steady_clock::time_point started;
            std::optional<R> result{};
            // Resumes the caller with the result, the block freed first.
            static void resume(std::unique_ptr<Waiting> w) {
              Handler h = std::move(w->handler);
              R r = std::move(*w->result);
              w.reset();
              std::move(h)(nullptr, std::move(r));
            }
            static void post(std::unique_ptr<Waiting> w, bool dispatch) {
              auto ex = w->guard.get_executor();
              auto answer = [w = std::move(w)]() mutable { resume(std::move(w)); };
              dispatch ? asio::dispatch(ex, std::move(answer)) : asio::post(ex, std::move(answer));
            }
          };
          auto* waiting = new Waiting{this, std::move(handler), asio::make_work_guard(io),
                                      std::chrono::steady_clock::now()};
          queued_calls_.fetch_add(1, std::memory_order_relaxed);
          try {
            begin([waiting](R result) {
              Runtime& rt = *waiting->rt;
              rt.metrics.observe_store(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting->started)
                      .count());
              waiting->result.emplace(std::move(result));
              if (common::Handoff* batch = common::Handoff::current()) {
                // Delivered with the rest of its batch (deliver_batch), which counts
                // it answered once it is posted.
                batch->defer(&rt, &Runtime::deliver_batch,
                             common::Deferred(waiting, [](void* p, bool run) {
                               std::unique_ptr<Waiting> w(static_cast<Waiting*>(p));
                               if (run) Waiting::post(std::move(w), true);
                             }));
                return;
              }
              Waiting::post(std::unique_ptr<Waiting>(waiting), false);
              rt.call_answered();
            });
          } catch (...) {
            // Not queued (a store throws before it takes a call, never after), so
            // nothing will answer it and shutdown must not wait for it. The caller's
            // co_await throws it: escaping here, it would leave through io.run() (Asio
            // 1.81 runs the initiation outside the coroutine) and stop the I/O thread.
            call_answered();
            std::unique_ptr<Waiting> own(waiting);
            auto ex = own->guard.get_executor();
            asio::post(ex, [own = std::move(own), error = std::current_exception()]() mutable {
              std::move(own->handler)(error, R{});
            });
          }
        },
        asio::use_awaitable, std::move(start));
  }

  /// Waits until the store has answered every call queued() handed it: its answers
  /// are posted to the I/O executor, which must outlive them (as db_pool.join()
  /// waits for blocking() calls).
  void wait_for_queued_calls() {
    std::unique_lock lock(queued_mu_);
    all_answered_.wait(lock, [this] { return queued_calls_.load() == 0; });
  }
  /// Calls queued() handed the store that it has not answered yet.
  long queued_calls() const { return queued_calls_.load(); }

 private:
  engine::Coordinator::Hooks coordinator_hooks() {
    engine::Coordinator::Hooks hooks;
    hooks.prepare_replay = prepare_replay;
    hooks.run_blocking = [this](std::function<void()> call) {
      asio::post(db_pool, [call = std::move(call)] { call(); });
    };
    hooks.retry_completion = [this](const store::RecordId& id, std::int64_t token,
                                    const engine::RoutePolicy& route, engine::KeptAnswer kept) {
      return completions.retry(id, token, route, std::move(kept));
    };
    return hooks;
  }

  // A batch's answers (common::Handoff), posted to the I/O threads together, each
  // resumed on its own executor: a dispatch there runs it at once unless its strand
  // is busy on another thread. One post per I/O thread, so that with
  // `server.threads` above one the batch's requests still go on side by side.
  static void deliver_batch(void* self, std::vector<common::Deferred>& answers) {
    auto& rt = *static_cast<Runtime*>(self);
    const std::size_t n = answers.size();
    const std::size_t posts = std::min(n, rt.io_threads_);
    auto shared = std::make_shared<std::vector<common::Deferred>>(std::move(answers));
    for (std::size_t part = 0; part < posts; ++part) {
      asio::post(rt.io_, [shared, part, posts] {
        for (std::size_t i = part; i < shared->size(); i += posts) (*shared)[i]();
      });
    }
    for (std::size_t i = 0; i < n; ++i) rt.call_answered();
  }

  // The count goes up without the lock, and down under it: wait_for_queued_calls()
  // sees zero only once the last answerer is inside this lock, and returns (so the
  // Runtime may go) only after it has let go of it.
  void call_answered() {
    std::lock_guard lock(queued_mu_);
    if (queued_calls_.fetch_sub(1, std::memory_order_acq_rel) == 1) all_answered_.notify_all();
  }

  mutable std::mutex mu_;
  std::shared_ptr<const Settings> settings_;
  std::atomic<std::uint64_t> settings_version_{1};
  std::mutex queued_mu_;
  std::condition_variable all_answered_;
  std::atomic<long> queued_calls_{0};  // handed to the store by queued(), not answered yet
  asio::io_context& io_;
  std::size_t io_threads_;  // server.threads, which a reload does not change
};

}  // namespace idemproxy::proxy
