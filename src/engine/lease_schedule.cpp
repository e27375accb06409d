#include "idemproxy/engine/lease_schedule.hpp"

namespace idemproxy::engine {

LeaseSchedule::Hold::Hold(LeaseSchedule& schedule, const store::RecordId& id, std::int64_t token,
                          Duration lease, Clock::time_point now)
    : schedule_(schedule) {
  std::lock_guard lock(schedule_.mu_);
  ticket_ = schedule_.next_ticket_++;
  schedule_.held_.emplace(ticket_, Held{&id, token, lease, now + lease / 3});
}

LeaseSchedule::Hold::~Hold() {
  std::lock_guard lock(schedule_.mu_);
  schedule_.held_.erase(ticket_);
}

std::size_t LeaseSchedule::size() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

void LeaseSchedule::take_due(Clock::time_point now, std::vector<Due>& out) {
  out.clear();
  std::lock_guard lock(mu_);
  for (auto& [ticket, held] : held_) {
    if (held.due > now) continue;
    out.push_back({*held.id, held.token, held.lease});
    held.due = now + held.lease / 3;
  }
}

}  // namespace idemproxy::engine
