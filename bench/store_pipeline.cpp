// Group commit two ways on one PostgreSQL, with the store's own multi-row statements
// (src/store/pg/statements.hpp, the exact text), for issue 26's item 3:
//   threads SLOTS   SLOTS threads, each with a blocking connection and one batch at a
//                   time: GroupCommit's design (its slots are a quarter of pool_size).
//   pipeline DEPTH  one thread and one non-blocking connection in libpq's pipeline
//                   mode (PQenterPipelineMode), up to DEPTH batches in flight on it,
//                   each ended by its own sync (its own commit, its own failure).
// CLIENTS simulated requests each claim a fresh key, then complete it, then claim the
// next: the proxy's fresh-key load with the proxy, the upstream and the network
// taken out, so what is left is the database's work per key and the driver's. THINK_US
// stands for the upstream's answer: a claimed key's completion is queued after its
// claim's answer, THINK_US on average (uniform from half to one and a half times it,
// so that the clients do not move in step; 0: at once, which keeps every batch full).
// A batch takes what is queued (up to BATCH_MAX): claims and completions together go
// as kClaimCompleteMany, one kind alone as kClaimMany or kCompleteMany.
//   bench_store_pipeline DSN threads|pipeline N CLIENTS SECONDS BATCH_MAX THINK_US
// Prints "keys K batches B seconds S"; bench/store_pipeline.sh adds the CPU figures.
#include <libpq-fe.h>
#include <poll.h>
#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "store/pg/array_text.hpp"
#include "store/pg/statements.hpp"

namespace {

using idemproxy::store::pg::ArrayText;
using idemproxy::store::pg::kClaimCompleteMany;
using idemproxy::store::pg::kClaimMany;
using idemproxy::store::pg::kCompleteMany;
using idemproxy::store::pg::Statement;

struct Client {
  int id = 0;
  long seq = 0;
  bool claimed = false;  // the next operation is the completion
  long long token = 0;
  std::string key() const { return "c" + std::to_string(id) + "-" + std::to_string(seq); }
};

// A formed batch: its statement's parameters, and whom each array position answers.
struct Batch {
  std::vector<Client*> claims, completions;
  const Statement* statement = nullptr;
  std::vector<std::string> texts;
  std::vector<const char*> params;
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "store_pipeline: %s\n", what.c_str());
  std::exit(1);
}

std::string run_id() {
  return std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

class Load {
 public:
  using Clock = std::chrono::steady_clock;
  Load(int clients, std::chrono::microseconds think)
      : clients_(static_cast<std::size_t>(clients)), prefix_(run_id()), think_(think) {
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      clients_[i].id = static_cast<int>(i);
      queue_.push_back(&clients_[i]);
    }
  }

  // Up to `most` queued operations, as one statement's parameters (empty: none queued).
  Batch take(std::size_t most) {
    Batch b;
    const auto now = Clock::now();
    while (!thinking_.empty() && thinking_.top().first <= now) {
      queue_.push_back(thinking_.top().second);
      thinking_.pop();
    }
    while (!queue_.empty() && b.claims.size() + b.completions.size() < most) {
      Client* c = queue_.front();
      queue_.pop_front();
      (c->claimed ? b.completions : b.claims).push_back(c);
    }
    if (b.claims.empty() && b.completions.empty()) return b;
    std::vector<ArrayText> claim(10), done(8);
    for (Client* c : b.claims) {
      claim[0].add(std::string_view("bench"));
      claim[1].add(prefix_ + c->key());
      claim[2].add(std::string(64, 'f'));
      claim[3].add(std::string_view("orders"));
      claim[4].add(std::string_view("POST"));
      claim[5].add(std::string_view("/v1/orders"));
      claim[6].add(30000LL);
      claim[7].add(86400000LL);
      claim[8].add(static_cast<const char*>(nullptr));
      claim[9].add(static_cast<long long>(c->id) * 1000000000LL + c->seq);
    }
    for (Client* c : b.completions) {
      done[0].add(std::string_view("bench"));
      done[1].add(prefix_ + c->key());
      done[2].add(c->token);
      done[3].add(201LL);
      done[4].add(std::optional<std::string>("Content-Type: application/json\r\n"), true);
      done[5].add(std::optional<std::string>(R"({"id":"ord_1","status":"created"})"), true);
      done[6].add(86400000LL);
      done[7].add(static_cast<const char*>(nullptr));
    }
    if (!b.claims.empty()) {
      for (auto& a : claim) b.texts.push_back(std::move(a).done());
      b.texts.insert(b.texts.begin() + 9, "false");  // $10, retake, between $9 and $11
    }
    if (!b.completions.empty()) {
      for (auto& a : done) b.texts.push_back(std::move(a).done());
    }
    b.statement = b.completions.empty() ? &kClaimMany
                  : b.claims.empty()    ? &kCompleteMany
                                        : &kClaimCompleteMany;
    for (const auto& t : b.texts) b.params.push_back(t.c_str());
    return b;
  }

  // Hands each member its row of `r` and queues its next operation.
  void answer(Batch& b, const PGresult* r) {
    const int in_n = PQfnumber(r, "in_n");
    const int token = PQfnumber(r, "token");
    const int claimed = PQfnumber(r, "claimed");
    const int completion = PQfnumber(r, "completion");
    if (in_n < 0) fail("no in_n in the answer");
    std::size_t claims_answered = 0, completions_answered = 0;
    for (int row = 0; row < PQntuples(r); ++row) {
      const auto n = std::strtoul(PQgetvalue(r, row, in_n), nullptr, 10);
      const bool is_completion =
          b.claims.empty() || (completion >= 0 && PQgetvalue(r, row, completion)[0] == 't');
      if (is_completion) {
        Client* c = b.completions.at(n - 1);
        c->claimed = false;
        ++c->seq;
        ++completions_answered;
        ++keys_;
      } else {
        if (PQgetvalue(r, row, claimed)[0] != 't') fail("a fresh key was not claimed");
        Client* c = b.claims.at(n - 1);
        c->token = std::strtoll(PQgetvalue(r, row, token), nullptr, 10);
        c->claimed = true;
        ++claims_answered;
      }
    }
    if (claims_answered != b.claims.size() || completions_answered != b.completions.size()) {
      fail("a batch's answer left members without a row");
    }
    const auto now = Clock::now();
    for (Client* c : b.claims) {
      if (think_.count() > 0) {
        const auto think = std::uniform_int_distribution<long>(think_.count() / 2,
                                                               think_.count() * 3 / 2)(random_);
        thinking_.emplace(now + std::chrono::microseconds(think), c);
      } else {
        queue_.push_back(c);
      }
    }
    for (Client* c : b.completions) queue_.push_back(c);
    ++batches_;
  }

  /// When the next thinking client's completion is due (none: a while from now).
  Clock::time_point next_due() const {
    return thinking_.empty() ? Clock::now() + std::chrono::milliseconds(10) : thinking_.top().first;
  }
  long keys() const { return keys_; }
  long batches() const { return batches_; }

 private:
  std::vector<Client> clients_;
  std::string prefix_;
  std::chrono::microseconds think_;
  std::deque<Client*> queue_;
  using Due = std::pair<Clock::time_point, Client*>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> thinking_;  // the soonest on top
  std::mt19937 random_{42};
  long keys_ = 0, batches_ = 0;
};

PGconn* connect(const char* dsn) {
  PGconn* c = PQconnectdb(dsn);
  if (PQstatus(c) != CONNECTION_OK) fail(PQerrorMessage(c));
  for (const Statement* s : {&kClaimMany, &kCompleteMany, &kClaimCompleteMany}) {
    PGresult* r = PQprepare(c, s->name, s->sql, 0, nullptr);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fail(PQerrorMessage(c));
    PQclear(r);
  }
  return c;
}

// GroupCommit's design: `slots` threads, each running one batch at a time on its own
// connection, the queue shared under a lock.
void run_threads(const char* dsn, int slots, Load& load, std::size_t batch_max,
                 std::chrono::steady_clock::time_point until) {
  std::mutex mu;
  std::condition_variable ready;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    threads.emplace_back([&] {
      PGconn* c = connect(dsn);
      std::unique_lock lock(mu);
      while (std::chrono::steady_clock::now() < until) {
        Batch b = load.take(batch_max);
        if (!b.statement) {
          ready.wait_until(lock, load.next_due());
          continue;
        }
        lock.unlock();
        PGresult* r = PQexecPrepared(c, b.statement->name, static_cast<int>(b.params.size()),
                                     b.params.data(), nullptr, nullptr, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) fail(PQerrorMessage(c));
        lock.lock();
        load.answer(b, r);
        lock.unlock();
        PQclear(r);
        ready.notify_all();
        lock.lock();
      }
      lock.unlock();
      PQfinish(c);
    });
  }
  for (auto& t : threads) t.join();
}

// Item 3's design: one connection in pipeline mode, up to `depth` batches in flight,
// each its own statement and sync; the answers come back in order.
void run_pipeline(const char* dsn, int depth, Load& load, std::size_t batch_max,
                  std::chrono::steady_clock::time_point until) {
  PGconn* c = connect(dsn);
  if (PQsetnonblocking(c, 1) != 0 || PQenterPipelineMode(c) != 1) fail(PQerrorMessage(c));
  struct InFlight {
    Batch batch;
    int stage = 0;  // 0: its rows next, 1: the end of its results, 2: its sync
  };
  std::deque<InFlight> in_flight;
  const int fd = PQsocket(c);
  while (std::chrono::steady_clock::now() < until || !in_flight.empty()) {
    while (std::chrono::steady_clock::now() < until &&
           in_flight.size() < static_cast<std::size_t>(depth)) {
      Batch b = load.take(batch_max);
      if (!b.statement) break;
      if (PQsendQueryPrepared(c, b.statement->name, static_cast<int>(b.params.size()),
                              b.params.data(), nullptr, nullptr, 0) != 1 ||
          PQpipelineSync(c) != 1) {
        fail(PQerrorMessage(c));
      }
      in_flight.push_back({std::move(b)});
    }
    const int unsent = PQflush(c);
    if (unsent < 0) fail(PQerrorMessage(c));
    pollfd p{fd, static_cast<short>(POLLIN | (unsent == 1 ? POLLOUT : 0)), 0};
    // Until an answer comes, or (with room for a batch) the next thinking client is due.
    const auto wait =
        in_flight.size() < static_cast<std::size_t>(depth)
            ? std::max<std::chrono::nanoseconds>(load.next_due() - std::chrono::steady_clock::now(),
                                                 std::chrono::nanoseconds(0))
            : std::chrono::nanoseconds(std::chrono::milliseconds(100));
    const timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                      static_cast<long>(wait.count() % 1000000000)};
    if (::ppoll(&p, 1, &ts, nullptr) < 0) fail("poll failed");
    if ((p.revents & POLLIN) != 0 && PQconsumeInput(c) != 1) fail(PQerrorMessage(c));
    while (!in_flight.empty() && PQisBusy(c) == 0) {
      PGresult* r = PQgetResult(c);
      InFlight& f = in_flight.front();
      if (f.stage == 0) {
        if (PQresultStatus(r) != PGRES_TUPLES_OK) fail(PQerrorMessage(c));
        load.answer(f.batch, r);
        f.stage = 1;
      } else if (f.stage == 1) {
        if (r != nullptr) fail("more than one result for a batch");
        f.stage = 2;
      } else {
        if (PQresultStatus(r) != PGRES_PIPELINE_SYNC) fail("no sync after a batch");
        in_flight.pop_front();
      }
      PQclear(r);
    }
  }
  PQfinish(c);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: bench_store_pipeline DSN threads|pipeline N CLIENTS SECONDS BATCH_MAX "
                 "THINK_US\n");
    return 2;
  }
  const std::string mode = argv[2];
  const int n = std::atoi(argv[3]);
  const int clients = std::atoi(argv[4]);
  const double seconds = std::atof(argv[5]);
  const auto batch_max = static_cast<std::size_t>(std::atoi(argv[6]));
  if (n < 1 || clients < 1 || seconds <= 0 || batch_max < 1) fail("bad arguments");
  Load load(clients, std::chrono::microseconds(std::atol(argv[7])));
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(seconds));
  if (mode == "threads") {
    run_threads(argv[1], n, load, batch_max, until);
  } else if (mode == "pipeline") {
    run_pipeline(argv[1], n, load, batch_max, until);
  } else {
    fail("mode is threads or pipeline");
  }
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("keys %ld batches %ld seconds %.3f\n", load.keys(), load.batches(), took);
  return 0;
}
