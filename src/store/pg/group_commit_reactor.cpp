// Group commit on the caller's event loop. A claim or completion submitted from a
// thread that names its loop (common::Reactor::current: the proxy's I/O threads) has
// its lane drained there: the batch's one statement is sent and read with libpq's
// non-blocking calls on an idle pooled connection (reactor_statement.hpp), the loop
// waits for the connection's socket as for any other, and the members' answers are
// handed over on the same thread. No runner thread is woken, nothing made on one
// thread is freed on another, and no answer crosses threads: with a runner, each
// batch cost a wake-up of the runner, its sleep in libpq's poll, and a wake-up of the
// I/O thread for the answers.
//
// Everything else about a batch is as on a runner (group_commit.cpp): one batch at a
// time while it fills (another beside it only while a full one waits), batch_wait for
// company after a batch that had some (on the loop's timer, so the loop goes on
// meanwhile), the statement in autocommit with synchronous_commit on, so a claim is
// durable before its answer is handed over, and a claim that saw no row, or a later
// claim of the same key, settled on a runner afterwards. A batch the loop cannot send
// goes to a runner, which drains on: one that needs two statements (claims of both
// retake settings, or a key both claimed and completed), or one that finds no idle
// connection (the loop never waits for one, nor connects). A statement that fails
// runs again one member at a time on a runner, as a failed batch does there; a
// connection that broke is dropped, and its members run again as a runner's retry
// would.
#include <spdlog/spdlog.h>

#include <memory>
#include <utility>
#include <vector>

#include "store/pg/group_commit.hpp"
#include "store/pg/reactor_statement.hpp"

namespace idemproxy::store::pg {

namespace {

// A batch in flight on a loop: what its statement reads until it is answered.
struct LoopBatch {
  std::vector<Pending*> members;
  std::unique_ptr<Connection> conn;
  std::vector<std::string> claim_arrays, completion_arrays;  // GroupCommit::Arrays
  std::vector<Pending*>* claims = nullptr;  // the split's claims (one retake setting)
};

}  // namespace

void GroupCommit::start_on(Lane& lane, common::Reactor& loop) {
  loop.post([this, &lane, &loop](bool running) {
    if (running) return drain_on(lane, loop);
    runners_.post([this, &lane] { drain(lane); });  // the loop stopped first
  });
}

void GroupCommit::drain_on(Lane& lane, common::Reactor& loop) {
  std::vector<Pending*> batch;
  bool more = false;
  std::shared_ptr<std::atomic<bool>> over;  // a wait for company begun here
  {
    std::lock_guard lock(mu_);
    auto& queue = lane.queue;
    if (queue.empty()) {
      stopped_draining(lane);
      return;
    }
    // After a batch with company, up to batch_wait for as much again, as a runner's
    // drain waits (wait_for_company), without holding the loop: submit() resumes the
    // drain once that many are queued, or the timer does.
    const std::size_t company = std::min(lane.last_size, batch_limit());
    if (options_.batch_wait.count() > 0 && company >= 2 && queue.size() < company &&
        lane.expected == 0) {
      lane.expected = company;
      lane.waiting_on = &loop;
      over = lane.wait_over = std::make_shared<std::atomic<bool>>(false);
    } else {
      lane.expected = 0;
      const auto n = std::min(queue.size(), batch_limit());
      lane.last_size = n;
      batch.assign(queue.begin(), queue.begin() + static_cast<long>(n));
      queue.erase(queue.begin(), queue.begin() + static_cast<long>(n));
      more = may_start(lane);  // a full batch still queued, and another slot free
      if (more) ++lane.running;
    }
  }
  if (over) {
    // Unlocked: a loop that stopped calls back at once.
    loop.after(options_.batch_wait, [this, &lane, &loop, over](bool running) {
      if (over->exchange(true)) return;  // the company came first, and the drain went on
      // The wait ends here, so the drain still holds its slot: the lane is still there.
      {
        std::lock_guard lock(mu_);
        lane.waiting_on = nullptr;
        lane.wait_over.reset();
      }
      if (!running) return runners_.post([this, &lane] { drain(lane); });
      drain_on(lane, loop);
    });
    return;
  }
  if (more) start_on(lane, loop);
  try {
    if (send_on_loop(batch, lane, loop)) return;
  } catch (const std::exception& e) {  // nothing was sent: a runner runs it
    spdlog::warn("store: a batch could not be sent on the event loop: {}", e.what());
  }
  // A runner runs this batch, then drains on, holding the lane's slot.
  runners_.post([this, &lane, batch] {
    run_and_finish(batch, kPlainLane);
    drain(lane);
  });
}

bool GroupCommit::send_on_loop(const std::vector<Pending*>& batch, Lane& lane,
                               common::Reactor& loop) {
  if (pool_.distributed()) return false;
  auto split_up = std::make_shared<Split>(split(batch, kPlainLane));
  Split& s = *split_up;
  if (!s.claims[0].empty() && !s.claims[1].empty()) return false;  // two statements
  std::vector<Pending*>& claims = s.claims[0].empty() ? s.claims[1] : s.claims[0];
  if (!claims.empty() && !s.completions.empty() && !s.together) return false;  // a key in both
  auto sent = std::make_shared<LoopBatch>();
  sent->members = batch;
  sent->claims = &claims;
  // The parameters as run_many and run_together bind them: the arrays in binary,
  // the retake setting as text.
  std::vector<WireParam> params;
  const auto binary = [&params](const std::string& b) {
    params.push_back({b.data(), static_cast<int>(b.size()), 1});
  };
  if (!s.completions.empty()) sent->completion_arrays = completion_arrays(s.completions);
  const Statement* statement = &kCompleteMany;
  if (!claims.empty()) {
    sent->claim_arrays = claim_arrays(claims);
    const auto& a = sent->claim_arrays;
    for (int i = 0; i < 9; ++i) binary(a[static_cast<std::size_t>(i)]);
    params.push_back({claims.front()->claim->req.retake_stale ? "t" : "f", 1, 0});
    binary(a[9]);
    for (const auto& d : sent->completion_arrays) binary(d);
    binary(a[10]);
    statement = s.completions.empty() ? &kClaimMany : &kClaimCompleteMany;
  } else {
    for (const auto& d : sent->completion_arrays) binary(d);
  }
  sent->conn = pool_.try_checkout();  // last: nothing after it throws before it is sent
  if (!sent->conn) return false;
  Connection& c = *sent->conn;
  auto answered = [this, sent, split_up](ReactorAnswer answer) {
    pool_.give_back(answer.broken ? nullptr : std::move(sent->conn));
    Split& s = *split_up;
    std::vector<Pending*>& claims = *sent->claims;
    const char* what = claims.empty()          ? "completions"
                       : s.completions.empty() ? "claims"
                                               : "claims and completions";
    bool ok = batch_succeeded(answer.rows.has_value(), sent->members.size(), what);
    bool watched = false;  // another instance waits for one of the completions
    if (ok) {
      try {
        const pqxx::result& rows = *answer.rows;
        const Columns& at =
            claims.empty()
                ? give_rows(rows, s.completions)
                : give_rows(rows, claims, s.completions.empty() ? nullptr : &s.completions);
        watched = !s.completions.empty() &&
                  !watched_ids(rows, at, s.completions, !claims.empty()).empty();
      } catch (const std::exception& e) {
        spdlog::warn("store: a batch's answer could not be read ({}); running each on its own",
                     e.what());
        ok = false;
      }
    }
    counted(sent->members.size(), true);
    if (!ok) {
      // Nothing changed (an SQL error), or the connection broke: each runs again on
      // its own, as on a runner.
      runners_.post([this, sent, split_up] {
        for (auto* group : {sent->claims, &split_up->completions}) {
          for (Pending* p : *group) run_alone(*p);
        }
        settle(*split_up);
        finish(sent->members);
      });
    } else if (watched || unsettled(s)) {
      // The finishes another instance waits for are announced before their answers
      // are handed over, as on a runner; that, and settling, waits on a runner.
      auto rows = std::make_shared<pqxx::result>(std::move(*answer.rows));
      runners_.post([this, sent, split_up, rows, watched] {
        if (watched) {
          announce(
              watched_ids(*rows, Columns(*rows), split_up->completions, !sent->claims->empty()));
        }
        settle(*split_up);
        finish(sent->members);
      });
    } else {
      finish(sent->members);
    }
  };
  try {
    send_on(loop, c, *statement, std::move(params),
            [this, answered = std::move(answered), &lane, &loop](ReactorAnswer answer) {
              try {
                answered(std::move(answer));
              } catch (const std::exception& e) {  // the lane must drain on regardless
                spdlog::error("store: a batch's answers were not all handed over: {}", e.what());
              }
              drain_on(lane, loop);
            });
  } catch (...) {
    if (sent->conn) pool_.give_back(std::move(sent->conn));  // nothing was sent on it
    throw;
  }
  return true;
}

void GroupCommit::announce(const std::vector<const RecordId*>& ids) {
  const auto told = pool_.with_connection<Done>([&](Connection& c) -> Result<Done> {
    Write w(c);
    c.announce(w.tx(), kDoneChannel, ids);
    w.commit();
    return Done{};
  });
  if (!told.ok()) spdlog::debug("store: finishes were not announced: {}", told.error().detail);
}

}  // namespace idemproxy::store::pg
