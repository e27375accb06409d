#include "proxy/remote_feed.hpp"

#include <atomic>
#include <string_view>
#include <vector>

namespace idemproxy::proxy {

store::Store::Watchers announcement_watchers(Runtime& rt) {
  store::Store::Watchers watchers;
  watchers.purged = [&rt](const store::RecordId& id) { rt.coordinator.forget(id); };
  watchers.finished = [&rt](const store::RecordId& id) { rt.coordinator.finished_elsewhere(id); };
  watchers.watched = [&rt](const store::RecordId& id) { RemoteFeed::start(rt, id); };
  watchers.resumed = [&rt] { rt.coordinator.announcements_resumed(); };
  return watchers;
}

// A follower catches up from the window a few chunks at a time: past that, the
// holder's own appends (announced too) store the rest.
constexpr std::size_t kFeedChunks = 4;

struct RemoteFeed::Batch {
  std::vector<store::Chunk> chunks;
  std::atomic<std::size_t> pending{0};
  std::atomic<bool> ok{true};
};

void RemoteFeed::start(Runtime& rt, const store::RecordId& id) {
  const auto live = rt.live.find(id);
  if (!live || live->followed()) return;
  auto feed = std::make_shared<RemoteFeed>(rt, id, live);
  live->follow_remotely([feed] { feed->changed(); });
}

void RemoteFeed::changed() {
  {
    std::lock_guard lock(mu_);
    if (running_) {
      dirty_ = true;
      return;
    }
    running_ = true;
  }
  run();
}

void RemoteFeed::run() {
  const auto live = live_.lock();
  auto batch = std::make_shared<Batch>();
  {
    std::lock_guard lock(mu_);
    dirty_ = false;
    if (live) batch->chunks = live->unstored_since(seq_, len_, kFeedChunks);
    if (batch->chunks.empty()) {
      running_ = false;
      return;
    }
  }
  batch->pending = batch->chunks.size();
  auto self = shared_from_this();
  for (const store::Chunk& c : batch->chunks) {
    rt_.append_then(id_, token_, c.seq, c.bytes, true,
                    [self, batch](const store::Result<store::Done>& r) {
                      if (!r.ok()) batch->ok = false;
                      if (--batch->pending == 0) self->stored(*batch);
                    });
  }
}

void RemoteFeed::stored(const Batch& batch) {
  {
    std::lock_guard lock(mu_);
    if (batch.ok) {
      const store::Chunk& last = batch.chunks.back();
      seq_ = last.seq;
      len_ = last.bytes.size();
    }
    // A failed append is tried again with the next change: the holder's own appends
    // store the chunk in any case.
    if (!dirty_ || !batch.ok) {
      running_ = false;
      return;
    }
  }
  run();
}

}  // namespace idemproxy::proxy
