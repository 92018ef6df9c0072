#include "core/write_batcher.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "core/dependencies.h"
#include "core/limits.h"

namespace sqlq::core {

WriteBatcher::WriteBatcher(Engine& engine, std::size_t max_group,
                           int max_leaders)
    : engine_(engine),
      max_group_(max_group),
      max_leaders_(std::max(1, max_leaders)) {}

Status WriteBatcher::Run(const std::function<Status(Conn&)>& op) {
  Writer self;
  self.op = &op;
  return Enter(self);
}

Result<std::vector<SendResult>> WriteBatcher::Send(const SendParams& p) {
  const std::span<const Message> messages = p.messages;
  Writer self;
  self.queue_id = p.queue_id;
  self.messages = messages;
  self.rules = p;
  self.rules.messages = {};
  self.weight = messages.size();
  std::size_t bytes = 0;
  for (const Message& m : messages) bytes += m.payload.size();
  self.combinable = messages.size() <= kMaxMessages && bytes <= kMaxBytes;
  Status s = Enter(self);
  if (!s.ok()) return s;
  return std::move(self.results);
}

Result<std::vector<WriteBatcher::Published>> WriteBatcher::Publish(
    std::string_view topic, std::span<const Message> messages) {
  Writer self;
  self.publish = true;
  self.topic = topic;
  self.messages = messages;
  // Small publishes wait to join a group, as small sends do.
  self.weight = messages.size();
  std::size_t bytes = 0;
  for (const Message& m : messages) bytes += m.payload.size();
  self.combinable = messages.size() <= kMaxMessages && bytes <= kMaxBytes;
  Status s = Enter(self);
  if (!s.ok()) return s;
  return std::move(self.published);
}

Result<WriteBatcher::Claimed> WriteBatcher::Claim(const ClaimRequest& request) {
  Writer self;
  self.claim = &request;
  self.queue_id = request.params.queue_id;
  // Small claims wait to join a group, as small sends do.
  self.weight = static_cast<std::size_t>(
      std::clamp<int>(request.params.max, 1, kMinGroupWeight));
  Status s = Enter(self);
  if (!s.ok()) return s;
  return std::move(self.claimed);
}

// A ClaimThen caller: what it asked, and what it gets.
struct WriteBatcher::Pending {
  ClaimRequest request;
  std::vector<Receipt> done;  // request.done's own copy
  ClaimDone then;
  Writer w;
};

void WriteBatcher::ClaimThen(ClaimRequest request, ClaimDone then) {
  if (!runner_) {
    then(Claim(request));
    return;
  }
  auto* p = new Pending;
  p->done.assign(request.done.begin(), request.done.end());
  p->request = std::move(request);
  p->request.done = p->done;
  p->then = std::move(then);
  p->w.claim = &p->request;
  p->w.queue_id = p->request.params.queue_id;
  p->w.weight = static_cast<std::size_t>(
      std::clamp<int>(p->request.params.max, 1, kMinGroupWeight));
  p->w.pending = p;
  const Counts counts = Arrive(true);
  bool lead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lead = Admit(p->w, counts);
  }
  // To lead: on this thread, as Claim would (no other thread may be free
  // to: every one of the runner's may be waiting for this group).
  if (lead) {
    Lead(&p->w);
    Finish(p);
  }
}

void WriteBatcher::Finish(Pending* p) {
  std::unique_ptr<Pending> owned(p);
  Depart(true);
  Writer& w = owned->w;
  if (w.status.ok()) {
    owned->then(std::move(w.claimed));
  } else {
    owned->then(std::move(w.status));
  }
}

WriteBatcher::Counts WriteBatcher::Arrive(bool claim) {
  return {.callers = callers_.fetch_add(1, std::memory_order_relaxed) + 1,
          .claims = claim
                        ? claimers_.fetch_add(1, std::memory_order_relaxed) + 1
                        : 0};
}

void WriteBatcher::Depart(bool claim) {
  callers_.fetch_sub(1, std::memory_order_relaxed);
  if (claim) claimers_.fetch_sub(1, std::memory_order_relaxed);
}

Status WriteBatcher::Enter(Writer& self) {
  // Callers in Enter now, and claims among them, this one included.
  const bool claim = self.claim != nullptr;
  const Counts counts = Arrive(claim);
  struct Leave {
    WriteBatcher& b;
    bool claim;
    ~Leave() { b.Depart(claim); }
  } leave{*this, claim};
  self.signal = ThreadSignal();
  bool lead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lead = Admit(self, counts);
  }
  if (lead) {
    Lead(&self);
    return std::move(self.status);
  }
  State state;
  {
    Signal& sig = *self.signal;
    std::unique_lock<std::mutex> lock(sig.m);
    sig.cv.wait(lock, [&] { return sig.state != State::kQueued; });
    state = sig.state;
  }
  // Told to lead: taken off the queue with nothing run yet.
  if (state == State::kLead) Lead(&self);
  return std::move(self.status);
}

bool WriteBatcher::Admit(Writer& self, Counts counts) {
  // How many callers (and claims) come at once: the most seen in Enter
  // over the last one or two windows of kWindow entries, so that callers
  // that are about but between two calls count too.
  constexpr std::size_t kWindow = 64;
  if (++entries_ % kWindow == 0) {
    seen_before_ = seen_;
    seen_ = Seen{};
  }
  seen_.callers = std::max(seen_.callers, counts.callers);
  seen_.claims = std::max(seen_.claims, counts.claims);
  const int busy = std::max(seen_.callers, seen_before_.callers);
  const int claiming = std::max(seen_.claims, seen_before_.claims);
  const bool claim = self.claim != nullptr;
  // Lead at once when nobody leads. Beside other leaders, when there is
  // enough to do (kMinGroupWeight), or when waiting could only idle (the
  // class comment): the one other caller about (for a claim, the one
  // other claim) is already in a running group, or queued and then taken
  // into this one. Otherwise a small caller queues, to share a running
  // leader's next group and its commit.
  if (leaders_ == 0 || (leaders_ < max_leaders_ &&
                        (busy <= 2 || (claim && claiming <= 2) ||
                         queued_weight_ + self.weight >= kMinGroupWeight))) {
    ++leaders_;
    peak_leaders_ = std::max(peak_leaders_, leaders_);
    return true;
  }
  if (self.signal) {
    std::lock_guard<std::mutex> sig(self.signal->m);
    self.signal->state = State::kQueued;
  }
  queue_.push_back(&self);
  queued_weight_ += self.weight;
  if (delaying_ && queue_.size() >= delay_until_) arrivals_.notify_one();
  return false;
}

void WriteBatcher::Lead(Writer* self) {
  // After our own group, keep leading while callers are queued (up to
  // kMaxRounds groups): handing over to a sleeping thread costs a context
  // switch per commit, which on small machines is a large part of a commit.
  constexpr int kMaxRounds = 4;
  std::unique_lock<std::mutex> lock(mu_);
  bool own = self != nullptr;  // our own operation is still to run
  // Beside other leaders, a next group needs enough to do (as for starting
  // one, Enter); what is left is theirs to take.
  auto more = [&] {
    return !queue_.empty() &&
           (leaders_ == 1 || queued_weight_ >= kMinGroupWeight);
  };
  for (int round = 0; own || more(); ++round) {
    if (round >= kMaxRounds) {
      // Hand our place to the first caller queued that a thread waits
      // for. Beside other leaders, what is queued is theirs.
      if (leaders_ > 1) break;
      if (self != nullptr) expected_ = std::min(max_group_, expected_ + 1);
      if (Appoint()) return;
      // Only ClaimThen callers are queued, and none has a thread to lead
      // with: the lead is given up, and a thread of the runner takes it
      // when free (Kick), unless a caller that comes meanwhile leads
      // them first. So our own caller is answered now, and the runner's
      // threads are never all waiting for a group only the runner runs.
      --leaders_;
      lock.unlock();
      runner_([this] { Kick(); });
      return;
    }
    // Commit delay: when the last group showed that more callers are active
    // than are queued now (those just answered are about to come back),
    // wait a moment for them, so that one commit serves them all instead of
    // two half-full ones. Bounded by kCommitDelay; a wait that times out
    // lowers the estimate, so a caller alone is never delayed twice.
    // Only with a single leader: with several, a caller with enough to do
    // leads a group of its own at once (Enter).
    auto waiting = [&] { return queue_.size() + (own ? 1 : 0); };
    if (max_leaders_ == 1 && waiting() < expected_) {
      delaying_ = true;
      delay_until_ = expected_ - (own ? 1 : 0);  // queued callers wanted
      if (!arrivals_.wait_for(lock, kCommitDelay,
                              [&] { return waiting() >= expected_; })) {
        expected_ = waiting();
      }
      delaying_ = false;
    }
    // Take the group waiting now, then run it unlocked so that new callers
    // can queue up for the next group meanwhile.
    std::vector<Writer*> group;
    const std::size_t room = max_group_ - (own ? 1 : 0);
    while (!queue_.empty() && group.size() < room) {
      group.push_back(queue_.front());
      queued_weight_ -= queue_.front()->weight;
      queue_.pop_front();
    }
    const bool with_self = own;
    if (own) group.push_back(self);  // after those who came first
    own = false;
    // Whoever is left (more than max_group) may lead beside us.
    while (!queue_.empty() && leaders_ < max_leaders_) {
      ++leaders_;
      if (!Appoint()) {
        --leaders_;
        break;
      }
      peak_leaders_ = std::max(peak_leaders_, leaders_);
    }
    lock.unlock();
    RunGroup(group);
    lock.lock();
    ++transactions_;
    operations_ += group.size();
    // Callers that can queue for our next group: the group about to be
    // answered plus those queued (counted before the answered come back),
    // but not our own caller, who cannot come back while we lead (waiting
    // for it would only run the commit delay out).
    expected_ = std::min(max_group_,
                         group.size() + queue_.size() - (with_self ? 1 : 0));
    lock.unlock();
    for (Writer* w : group) {
      if (w != self) Wake(*w, State::kDone);
    }
    lock.lock();
  }
  // Our caller comes back now: the next leader may count on it.
  if (self != nullptr) expected_ = std::min(max_group_, expected_ + 1);
  // Nothing queued, or what is queued is the other leaders'.
  --leaders_;
}

void WriteBatcher::Kick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leaders_ != 0 || queue_.empty()) return;  // led meanwhile
    ++leaders_;
    peak_leaders_ = std::max(peak_leaders_, leaders_);
  }
  Lead(nullptr);
}

bool WriteBatcher::Appoint() {
  // The first caller queued that a thread waits for: a ClaimThen caller
  // has none to lead with.
  auto it = std::find_if(queue_.begin(), queue_.end(),
                         [](const Writer* w) { return w->pending == nullptr; });
  if (it == queue_.end()) return false;
  Writer* next = *it;
  queued_weight_ -= next->weight;
  queue_.erase(it);
  Wake(*next, State::kLead);
  return true;
}

std::shared_ptr<WriteBatcher::Signal> WriteBatcher::ThreadSignal() {
  thread_local const auto signal = std::make_shared<Signal>();
  return signal;
}

void WriteBatcher::Wake(Writer& w, State state) {
  // No thread waits for a ClaimThen caller: its answer is handed over
  // here (it is never told to lead: Appoint).
  if (w.pending != nullptr) return Finish(w.pending);
  // Once w's caller sees its state it may return and destroy w: keep the
  // signal alive by our own reference, and touch nothing of w after.
  std::shared_ptr<Signal> sig = w.signal;
  {
    std::lock_guard<std::mutex> lock(sig->m);
    sig->state = state;
  }
  sig->cv.notify_one();
}

namespace {

// Copies the messages of `members` into `joined`, in order, unless there is
// only one member; returns them.
template <typename Members>
std::span<const Message> Join(const Members& members,
                              std::vector<Message>& joined) {
  if (members.size() == 1) return members.front()->messages;
  std::size_t total = 0;
  for (const auto* w : members) total += w->messages.size();
  joined.reserve(total);
  for (const auto* w : members) {
    joined.insert(joined.end(), w->messages.begin(), w->messages.end());
  }
  return joined;
}

// Hands each member its slice of `results`.
template <typename Members>
void Slice(const Members& members, const std::vector<SendResult>& results) {
  std::size_t at = 0;
  for (auto* w : members) {
    const auto from = results.begin() + static_cast<std::ptrdiff_t>(at);
    at += w->messages.size();
    w->results.assign(from, results.begin() + static_cast<std::ptrdiff_t>(at));
    w->status = Status::Ok();
  }
}

}  // namespace

bool WriteBatcher::Joins(const Writer* w, const Writer& lead) {
  return w->op == nullptr && w->claim == nullptr && !w->publish &&
         w->combinable && w->queue_id == lead.queue_id &&
         w->rules.unique_for == lead.rules.unique_for &&
         w->rules.grouped == lead.rules.grouped;
}

bool WriteBatcher::OneQueueSends(const std::vector<Writer*>& group) {
  const Writer* first = group.front();
  if (group.size() == 1) {
    return first->op == nullptr && first->claim == nullptr && !first->publish;
  }
  std::size_t total = 0;
  for (const Writer* w : group) {
    if (!Joins(w, *first)) return false;
    total += w->messages.size();
  }
  return total <= kMaxCombined;
}

void WriteBatcher::SlicePublished(const std::vector<Writer*>& members,
                                  std::vector<Published> all) {
  std::vector<std::size_t> from;
  std::size_t at = 0;
  for (Writer* w : members) {
    from.push_back(at);
    at += w->messages.size();
    w->published.clear();
    w->status = Status::Ok();
  }
  for (Published& p : all) {
    const std::size_t k = static_cast<std::size_t>(
        std::upper_bound(from.begin(), from.end(), p.delivery.message) -
        from.begin() - 1);
    p.delivery.message -= from[k];
    members[k]->published.push_back(std::move(p));
  }
}

bool WriteBatcher::OneTopicPublishes(const std::vector<Writer*>& group) {
  std::size_t total = 0;
  for (const Writer* w : group) {
    if (!w->publish || w->topic != group.front()->topic) return false;
    if (group.size() > 1 && !w->combinable) return false;
    total += w->messages.size();
  }
  return total <= kMaxCombined;
}

void WriteBatcher::JoinLate(std::vector<Writer*>& group) {
  const Writer& lead = *group.front();
  std::size_t total = 0;
  for (const Writer* w : group) total += w->messages.size();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    Writer* w = *it;
    if (!Joins(w, lead) || total + w->messages.size() > kMaxCombined ||
        group.size() >= max_group_) {
      ++it;
      continue;
    }
    total += w->messages.size();
    queued_weight_ -= w->weight;
    group.push_back(w);
    it = queue_.erase(it);
  }
}

void WriteBatcher::RunGroup(std::vector<Writer*>& group) {
  if (OneQueueSends(group)) {
    // The sends queued to the same queue by the time the engine wants the
    // messages (once its transaction is open) join this group: they are in
    // none yet, and would otherwise wait for a commit of their own.
    std::vector<Message> joined;
    std::span<const Message> all;
    bool taken = false;
    auto messages = [&]() -> std::span<const Message> {
      if (!taken) {
        if (group.size() > 1 || group.front()->combinable) JoinLate(group);
        all = Join(group, joined);
        taken = true;
      }
      return all;
    };
    auto r = engine_.SendAndCommit(group.front()->rules, messages);
    if (!r.ok()) {
      for (Writer* w : group) w->status = r.status();
      return;
    }
    Slice(group, *r);
    return;
  }
  if (ClaimAndCommit(group)) return;
  if (OneTopicPublishes(group)) {
    // One publish of everyone's messages in the engine's fewest round
    // trips, when it can; else the general way below.
    std::vector<Message> joined;
    auto r =
        engine_.PublishAndCommit(group.front()->topic, Join(group, joined));
    if (!r.ok()) {
      for (Writer* w : group) w->status = r.status();
      return;
    }
    if (r->has_value()) {
      SlicePublished(group, std::move(**r));
      return;
    }
  }
  RunGeneral(group);
}

bool WriteBatcher::Unflushed(const std::vector<Writer*>& group) const {
  if (!engine_.acks_unflushed()) return false;
  return std::all_of(group.begin(), group.end(), [](const Writer* w) {
    return w->claim != nullptr && w->claim->params.max == 0;
  });
}

void WriteBatcher::RunGeneral(const std::vector<Writer*>& group) {
  Released released;
  auto body = [&](Conn& conn) -> Status {
    // A transaction that is run again (after a deadlock) starts over.
    std::vector<char> sent(group.size(), 0);
    released.clear();
    for (std::size_t i = 0; i < group.size(); ++i) {
      Writer* w = group[i];
      if (w->claim != nullptr) {
        if (sent[i]) continue;
        Status s = RunClaims(conn, group, i, sent, released);
        if (!s.ok() && !IsCleanFailure(s)) return s;
        continue;
      }
      if (w->publish) {
        if (sent[i]) continue;
        Status s = RunPublishes(conn, group, i, sent);
        if (!s.ok() && !IsCleanFailure(s)) return s;
        continue;
      }
      if (w->op == nullptr) {
        if (sent[i]) continue;
        Status s = RunSends(conn, group, i, sent);
        if (!s.ok() && !IsCleanFailure(s)) return s;
        continue;
      }
      w->status = (*w->op)(conn);
      if (!w->status.ok() && !IsCleanFailure(w->status)) return w->status;
    }
    return Status::Ok();
  };
  Status commit =
      Unflushed(group) ? engine_.WriteUnflushed(body) : engine_.Write(body);
  if (commit.ok() && !released.empty() && on_released_) {
    on_released_(released);
  }
  if (!commit.ok()) {
    // Nothing of the group is stored: whoever succeeded (or never ran)
    // gets the error; a clean failure keeps its own reason.
    for (Writer* w : group) {
      if (w->status.ok()) {
        w->status = commit;
        w->results.clear();
        w->claimed = {};
        w->published.clear();
      }
    }
  }
}

std::vector<WriteBatcher::Writer*> WriteBatcher::Gather(
    const std::vector<Writer*>& group, std::size_t first,
    std::vector<char>& done, const std::function<bool(const Writer*)>& joins) {
  std::vector<Writer*> members = {group[first]};
  done[first] = 1;
  std::size_t total = group[first]->messages.size();
  if (!group[first]->combinable) return members;
  for (std::size_t j = first + 1; j < group.size(); ++j) {
    Writer* w = group[j];
    if (done[j] || !joins(w)) continue;
    if (total + w->messages.size() > kMaxCombined) break;
    members.push_back(w);
    done[j] = 1;
    total += w->messages.size();
  }
  return members;
}

Status WriteBatcher::RunSends(Conn& conn, const std::vector<Writer*>& group,
                              std::size_t first, std::vector<char>& sent) {
  const Writer& lead = *group[first];
  const std::vector<Writer*> members = Gather(
      group, first, sent, [&](const Writer* w) { return Joins(w, lead); });
  std::vector<Message> joined;
  SendParams p = lead.rules;
  p.messages = Join(members, joined);
  auto r = engine_.Send(conn, p);
  if (!r.ok()) {
    for (Writer* w : members) {
      w->status = r.status();
      w->results.clear();
    }
    return r.status();
  }
  Slice(members, *r);
  return Status::Ok();
}

Status WriteBatcher::RunPublishes(Conn& conn, const std::vector<Writer*>& group,
                                  std::size_t first, std::vector<char>& done) {
  const Writer& lead = *group[first];
  const std::vector<Writer*> members =
      Gather(group, first, done, [&](const Writer* w) {
        return w->publish && w->combinable && w->topic == lead.topic;
      });
  std::vector<Message> joined;
  auto r = publish_(conn, lead.topic, Join(members, joined));
  if (r.ok()) {
    SlicePublished(members, std::move(*r));
    return Status::Ok();
  }
  if (members.size() == 1 || !IsCleanFailure(r.status())) {
    for (Writer* w : members) w->status = r.status();
    return r.status();
  }
  // The joined publish wrote nothing: each runs alone, so that only the
  // caller whose message was refused gets the error.
  for (Writer* w : members) {
    auto one = publish_(conn, w->topic, w->messages);
    if (!one.ok()) {
      w->status = one.status();
      if (!IsCleanFailure(w->status)) return w->status;
      continue;
    }
    w->published = std::move(*one);
    w->status = Status::Ok();
  }
  return Status::Ok();
}

bool WriteBatcher::ClaimsCombine(const ClaimRequest& a, const ClaimRequest& b) {
  const ClaimParams& x = a.params;
  const ClaimParams& y = b.params;
  // A byte limit never applies to a claim of one message (its first
  // message is always taken), so such a claim combines whatever its limit.
  auto unlimited = [](const ClaimParams& p) {
    return p.max_bytes == 0 || p.max == 1;
  };
  return x.queue_id == y.queue_id && x.lease == y.lease &&
         x.max_attempts == y.max_attempts && x.worker == y.worker &&
         unlimited(x) && unlimited(y) && a.archive == b.archive &&
         x.unique_for == y.unique_for && x.groups == y.groups &&
         x.group_limit == y.group_limit && x.max_leased == y.max_leased &&
         x.rate_u == y.rate_u && x.rate_burst == y.rate_burst;
}

std::vector<WriteBatcher::Writer*> WriteBatcher::ClaimMembers(
    const std::vector<Writer*>& group, std::size_t first,
    std::vector<char>& done, int& total) {
  const ClaimRequest& lead = *group[first]->claim;
  std::vector<Writer*> members = {group[first]};
  done[first] = 1;
  total = lead.params.max;
  for (std::size_t j = first + 1; j < group.size(); ++j) {
    Writer* w = group[j];
    if (done[j] || w->claim == nullptr || !ClaimsCombine(lead, *w->claim)) {
      continue;
    }
    if (total + w->claim->params.max > kMaxCombinedClaim) break;
    members.push_back(w);
    done[j] = 1;
    total += w->claim->params.max;
  }
  for (Writer* w : members) {
    w->status = Status::Ok();
    w->claimed = {};
  }
  return members;
}

AckManyParams WriteBatcher::AcksOf(const ClaimRequest& lead,
                                   std::span<const Receipt> receipts) {
  return {.queue_id = lead.params.queue_id,
          .receipts = receipts,
          .archive = lead.archive,
          .unique_for = lead.params.unique_for};
}

std::vector<Receipt> WriteBatcher::ClaimReceipts(
    const std::vector<Writer*>& members, std::vector<int>* gates) {
  std::vector<Receipt> receipts;
  for (Writer* w : members) {
    if (w->claim->ack) {
      receipts.push_back(*w->claim->ack);
      if (gates != nullptr) gates->push_back(w->claim->params.max);
    }
    receipts.insert(receipts.end(), w->claim->done.begin(),
                    w->claim->done.end());
    if (gates != nullptr) gates->resize(receipts.size(), 0);
  }
  return receipts;
}

int WriteBatcher::TakeAcks(const std::vector<Writer*>& members,
                           std::vector<Status> acked) {
  int refused = 0;
  std::size_t k = 0;
  for (Writer* w : members) {
    if (w->claim->ack && !acked[k++].ok()) {
      w->status = std::move(acked[k - 1]);
      refused += w->claim->params.max;
    }
    for (std::size_t d = 0; d < w->claim->done.size(); ++d) {
      w->claimed.done.push_back(std::move(acked[k++]));
    }
  }
  return refused;
}

void WriteBatcher::HandOut(const std::vector<Writer*>& members,
                           const ClaimParams& params, ClaimOutcome& r) {
  // Each member takes the next messages in claim order, up to its max; the
  // counters of expirations and dead letters stay with the first.
  std::size_t at = 0;
  bool counted = false;
  for (Writer* w : members) {
    if (!w->status.ok()) continue;
    w->claimed.token = params.token;
    ClaimOutcome& out = w->claimed.outcome;
    out.last_group = r.last_group;
    out.limited_by = r.limited_by;
    out.retry_after = r.retry_after;
    if (!counted) {
      out.expirations = r.expirations;
      out.dead_lettered = r.dead_lettered;
      counted = true;
    }
    const std::size_t n = std::min<std::size_t>(
        static_cast<std::size_t>(w->claim->params.max), r.messages.size() - at);
    for (std::size_t k = 0; k < n; ++k) {
      out.messages.push_back(std::move(r.messages[at + k]));
    }
    at += n;
  }
}

bool WriteBatcher::ClaimAndCommit(std::vector<Writer*>& group) {
  // Claims that combine, and the sends to one queue that share a call (the
  // group of producers and consumers working one queue), if any.
  const Writer* send = nullptr;
  const Writer* claim = nullptr;
  std::vector<Writer*> senders;
  std::size_t total_sent = 0;
  for (Writer* w : group) {
    if (w->claim != nullptr) {
      if (claim == nullptr) claim = w;
      continue;
    }
    if (send == nullptr) send = w;
    if (!Joins(w, *send)) return false;
    senders.push_back(w);
    total_sent += w->messages.size();
  }
  if (claim == nullptr || total_sent > kMaxCombined) return false;
  std::vector<char> done(group.size(), 0);
  int total = 0;
  const std::size_t first = static_cast<std::size_t>(
      std::find(group.begin(), group.end(), claim) - group.begin());
  const std::vector<Writer*> members = ClaimMembers(group, first, done, total);
  const ClaimRequest& lead = *claim->claim;
  if (members.size() + senders.size() != group.size() || Limited(lead.params)) {
    return false;
  }
  std::vector<int> gates;
  const std::vector<Receipt> receipts = ClaimReceipts(members, &gates);
  ClaimParams params = lead.params;
  params.max = total;
  if (members.size() > 1) params.max_bytes = 0;  // see ClaimsCombine
  AckManyParams acks = AcksOf(lead, receipts);
  acks.flush = !Unflushed(group);
  std::vector<Message> joined;
  Engine::SendsFirst sends;
  if (send != nullptr) {
    sends.to = send->rules;
    sends.to.messages = Join(senders, joined);
  }
  auto r = senders.empty()
               ? engine_.ClaimAndCommit(params, acks, gates)
               : engine_.SendsAndClaimAndCommit(sends, params, acks, gates);
  if (!r.ok() && !sends.sent) {
    for (Writer* w : group) w->status = r.status();
    return true;
  }
  if (sends.sent) {
    if (sends.sent->ok()) {
      Slice(senders, **sends.sent);
    } else {
      for (Writer* w : senders) w->status = sends.sent->status();
    }
    if (!r.ok()) {
      // The sends were committed; the claim failed after them.
      for (Writer* w : members) w->status = r.status();
      return true;
    }
    if (!r->has_value()) {
      // The sends are stored; the claims go the general way.
      RunGeneral(members);
      return true;
    }
  } else if (!r->has_value()) {
    return false;  // nothing done: the general way
  }
  Engine::ClaimCommitted& committed = **r;
  TakeAcks(members, std::move(committed.acks));
  HandOut(members, params, committed.outcome);
  return true;
}

Status WriteBatcher::RunClaims(Conn& conn, const std::vector<Writer*>& group,
                               std::size_t first, std::vector<char>& done,
                               std::vector<std::int64_t>& released) {
  const ClaimRequest& lead = *group[first]->claim;
  int total = 0;
  const std::vector<Writer*> members = ClaimMembers(group, first, done, total);
  // The acks first, in one call; a member whose `ack` is refused claims
  // nothing, refusals of `done` are only reported.
  const std::vector<Receipt> receipts = ClaimReceipts(members, nullptr);
  if (!receipts.empty()) {
    auto acked =
        AckManyAndRelease(engine_, conn, AcksOf(lead, receipts), released);
    if (!acked.ok()) {
      for (Writer* w : members) w->status = acked.status();
      return acked.status();
    }
    total -= TakeAcks(members, std::move(*acked));
  }
  if (total == 0) return Status::Ok();
  ClaimParams params = lead.params;
  params.max = total;
  if (members.size() > 1) params.max_bytes = 0;  // see ClaimsCombine
  auto r = Limited(params) ? ClaimLimited(engine_, conn, params)
                           : engine_.Claim(conn, params);
  if (!r.ok()) {
    for (Writer* w : members) {
      if (w->status.ok()) w->status = r.status();
    }
    return r.status();
  }
  HandOut(members, params, *r);
  return Status::Ok();
}

std::size_t WriteBatcher::TEST_transactions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transactions_;
}

int WriteBatcher::TEST_peak_leaders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_leaders_;
}

std::size_t WriteBatcher::TEST_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

std::size_t WriteBatcher::TEST_operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}

}  // namespace sqlq::core
