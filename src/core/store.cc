// Store and Tx: opening, queue management, caller transactions.

#include "sqlq/store.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "core/dependencies.h"
#include "core/periodic_thread.h"
#include "core/schedules.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "core/waiting_report.h"

namespace sqlq {

namespace core {

StoreImpl::StoreImpl(std::string url, std::unique_ptr<Engine> engine)
    : url_(std::move(url)),
      engine_(std::move(engine)),
      batcher_(*engine_, /*max_group=*/512, engine_->write_groups()),
      scheduler_holder_(NewSchedulerHolder()) {
  engine_->SetWaitingProbe([this] { return hub_.waiting(); });
  batcher_.set_on_released([this](const std::vector<std::int64_t>& released) {
    WakeReleased(*this, released);
  });
  batcher_.set_publish([this](Conn& conn, std::string_view topic,
                              std::span<const Message> messages) {
    return PublishIn(*this, conn, topic, messages);
  });
  engine_->WatchForeignWrites([this] { hub_.NotifyAll(); });
}

StoreImpl::~StoreImpl() {
  reporter_.reset();
  scheduler_.reset();
}

void StoreImpl::StartWaitingReports() {
  if (!reporter_) reporter_ = std::make_unique<WaitingReporter>(*this);
}

void StoreImpl::StartScheduler() {
  if (!scheduler_) {
    scheduler_ = std::make_unique<PeriodicThread>(
        [this] { return SchedulerPass(*this); });
  }
}

Timestamp StoreImpl::Now() const {
  if (clock_) return clock_->Now();
  return std::chrono::time_point_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now());
}

std::chrono::milliseconds StoreImpl::poll_interval() const {
  return poll_interval_.load(std::memory_order_relaxed);
}

}  // namespace core

Status CheckQueueName(std::string_view name) {
  return core::ValidateName("queue", name);
}
Status CheckQueueOptions(const QueueOptions& options) {
  return core::ValidateQueueOptions(options);
}

Store::Store(std::unique_ptr<core::StoreImpl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;

// Store::Open is defined beside the engine registry (engines/engines.cc),
// so that core builds without any database client library.

const std::string& Store::url() const { return impl_->url(); }

Result<std::map<std::string, std::int64_t>> Store::WaitingConsumers() {
  return core::SnapshotRead<std::map<std::string, std::int64_t>>(
      *impl_, [](core::QueueOps& e, core::Conn& c) {
        return e.ReadWaiting(c, {.fresh = core::kWaitingFresh});
      });
}

std::size_t Store::TEST_write_transactions() const {
  return impl_->batcher().TEST_transactions();
}
std::size_t Store::TEST_write_operations() const {
  return impl_->batcher().TEST_operations();
}
std::size_t Store::TEST_waiting_claims() const {
  return impl_->hub().waiting();
}
std::size_t Store::TEST_sleeping_claims() const {
  return impl_->hub().asleep();
}
void Store::SetRunner(std::function<void(std::function<void()>)> run) {
  impl_->batcher().set_runner(std::move(run));
}
void Store::TEST_set_poll_interval(std::chrono::milliseconds interval) {
  impl_->set_poll_interval(interval);
}
bool Store::TEST_watching_foreign_writes() const {
  return impl_->engine().WatchingForeignWrites();
}

Result<WorkQueue> Store::CreateQueue(std::string_view name,
                                     const QueueOptions& options) {
  Status s = core::ValidateName("queue", name);
  if (!s.ok()) return s;
  s = core::ValidateQueueOptions(options);
  if (!s.ok()) return s;
  s = core::ValidateDeadLetterQueue(name, options);
  if (!s.ok()) return s;
  // Before: the queue's first claims find what they need. After: in case
  // another process, upgrading its schema meanwhile, undid it when it saw
  // no grouped queue yet.
  const bool grouped = options.groups != GroupMode::kNone;
  if (grouped) {
    s = impl_->engine().PrepareGroups();
    if (!s.ok()) return s;
  }
  core::QueueRecord record;
  s = impl_->engine().Write([&](core::Conn& conn) {
    Status loop =
        core::CheckDeadLetterLoop(impl_->engine(), conn, name, options);
    if (!loop.ok()) return loop;
    auto r = impl_->engine().CreateQueue(conn, {name, options});
    if (!r.ok()) return r.status();
    record = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (grouped) {
    s = impl_->engine().PrepareGroups();
    if (!s.ok()) return s;
  }
  return WorkQueue(
      std::make_shared<core::QueueImpl>(impl_.get(), std::move(record)));
}

Result<WorkQueue> Store::Queue(std::string_view name) {
  Status s = core::ValidateName("queue", name);
  if (!s.ok()) return s;
  core::QueueRecord record;
  s = impl_->engine().Read([&](core::Conn& conn) {
    auto r = impl_->engine().GetQueue(conn, name);
    if (!r.ok()) return r.status();
    record = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return WorkQueue(
      std::make_shared<core::QueueImpl>(impl_.get(), std::move(record)));
}

Result<std::vector<SendResult>> Store::SendAll(
    std::span<const QueuedMessage> messages) {
  if (messages.empty()) {
    return Status::InvalidArgument("a batch needs at least one message");
  }
  if (messages.size() > core::kMaxBatch) {
    return Status::TooLarge(fmt::format("batch of {} messages exceeds {}",
                                        messages.size(), core::kMaxBatch));
  }
  // Each queue looked up once; the handles live until the send is done.
  std::map<std::string, WorkQueue, std::less<>> handles;
  std::vector<core::QueueImpl*> queues;
  std::vector<Message> batch;
  queues.reserve(messages.size());
  batch.reserve(messages.size());
  const Timestamp now = impl_->Now();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const QueuedMessage& m = messages[i];
    auto it = handles.find(m.queue);
    if (it == handles.end()) {
      auto q = Queue(m.queue);
      if (!q.ok()) {
        return q.status().WithContext(fmt::format("message {}", i + 1));
      }
      it = handles.emplace(m.queue, std::move(*q)).first;
    }
    core::QueueImpl* q = it->second.impl_.get();
    const auto current = q->Current();
    Status s = core::ValidateMessage(m.message,
                                     current->options.max_payload_bytes, now);
    if (s.ok()) s = core::ValidateDependencies(m.message, i);
    if (!s.ok()) return s.WithContext(fmt::format("message {}", i + 1));
    queues.push_back(q);
    batch.push_back(m.message);
  }
  return core::SendAcross(*impl_, queues, batch);
}

Result<std::vector<QueueInfo>> Store::ListQueues() {
  std::vector<QueueInfo> out;
  Status s = impl_->engine().Read([&](core::Conn& conn) {
    auto r = impl_->engine().ListQueues(conn);
    if (!r.ok()) return r.status();
    for (auto& rec : *r) out.push_back(std::move(rec.info));
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Status Store::CheckWritable() {
  return impl_->engine().Write(
      [&](core::Conn& conn) { return impl_->engine().TouchSchema(conn); });
}

Status Store::DropQueue(std::string_view name) {
  Status s = core::ValidateName("queue", name);
  if (!s.ok()) return s;
  std::int64_t id = 0;
  s = impl_->engine().Write([&](core::Conn& conn) {
    auto r = impl_->engine().GetQueue(conn, name);
    if (!r.ok()) return r.status();
    id = r->id;
    Status dropped = impl_->engine().DropQueue(conn, r->id);
    if (dropped.ok()) {
      dropped = impl_->engine().DropSubscriptionsOf(conn, r->id);
    }
    if (!dropped.ok()) return dropped;
    // Its messages' waits go with them.
    dropped = impl_->engine().DropDependencies(conn, r->id);
    if (!dropped.ok()) return dropped;
    return impl_->engine().UnlinkDeadLetterQueue(conn, name).status();
  });
  if (!s.ok()) return s;
  // What waited for its messages in other queues follows its policy.
  core::SettleEnded(*impl_, id);
  // Claims waiting on the dropped queue look again and report kNotFound.
  impl_->hub().NotifyAll();
  return s;
}

namespace {

// Creates a thing of some kind: validates, then one write transaction.
template <typename Record, typename Options, typename Validate, typename Create>
Result<Record> CreateKind(core::StoreImpl& store, std::string_view name,
                          const Options& options, Validate validate,
                          Create create) {
  Status s = core::ValidateName("name", name);
  if (s.ok()) s = validate(options);
  if (!s.ok()) return s;
  return core::MergedWrite<Record>(
      store, [&](core::Engine& e, core::Conn& c) { return create(e, c); });
}

}  // namespace

Result<Ring> Store::CreateRing(std::string_view name,
                               const RingOptions& options) {
  auto r = CreateKind<core::RingRecord>(
      *impl_, name, options, core::ValidateRingOptions,
      [&](core::RingOps& e, core::Conn& c) {
        return e.CreateRing(c, {name, options});
      });
  if (!r.ok()) return r.status();
  return Ring(std::make_shared<core::RingImpl>(impl_.get(), std::move(*r)));
}

Result<Ring> Store::GetRing(std::string_view name) {
  Status s = core::ValidateName("ring", name);
  if (!s.ok()) return s;
  auto r = core::SnapshotRead<core::RingRecord>(
      *impl_,
      [&](core::RingOps& e, core::Conn& c) { return e.GetRing(c, name); });
  if (!r.ok()) return r.status();
  return Ring(std::make_shared<core::RingImpl>(impl_.get(), std::move(*r)));
}

Status Store::DropRing(std::string_view name) {
  Status s = core::ValidateName("ring", name);
  if (!s.ok()) return s;
  return impl_->engine().Write([&](core::Conn& conn) {
    auto r = impl_->engine().GetRing(conn, name);
    if (!r.ok()) return r.status();
    return impl_->engine().DropRing(conn, r->id);
  });
}

Result<Rotation> Store::CreateRotation(std::string_view name,
                                       const RotationOptions& options) {
  auto r = CreateKind<core::RotationRecord>(
      *impl_, name, options, core::ValidateRotationOptions,
      [&](core::RotationOps& e, core::Conn& c) {
        return e.CreateRotation(c, {name, options});
      });
  if (!r.ok()) return r.status();
  return Rotation(
      std::make_shared<core::RotationImpl>(impl_.get(), std::move(*r)));
}

Result<Rotation> Store::GetRotation(std::string_view name) {
  Status s = core::ValidateName("rotation", name);
  if (!s.ok()) return s;
  auto r = core::SnapshotRead<core::RotationRecord>(
      *impl_, [&](core::RotationOps& e, core::Conn& c) {
        return e.GetRotation(c, name);
      });
  if (!r.ok()) return r.status();
  return Rotation(
      std::make_shared<core::RotationImpl>(impl_.get(), std::move(*r)));
}

Status Store::DropRotation(std::string_view name) {
  Status s = core::ValidateName("rotation", name);
  if (!s.ok()) return s;
  return impl_->engine().Write([&](core::Conn& conn) {
    auto r = impl_->engine().GetRotation(conn, name);
    if (!r.ok()) return r.status();
    return impl_->engine().DropRotation(conn, r->id);
  });
}

namespace {

// The `Info` (name and options) of each record of one list of the rings
// and rotations (KindsRecord::rings or ::rotations).
template <typename Info, typename Records>
Result<std::vector<Info>> ListKind(core::StoreImpl& store,
                                   Records core::KindsRecord::*which) {
  auto all = core::SnapshotRead<core::KindsRecord>(
      store, [](core::RingOps& e, core::Conn& c) {
        return e.ListRingsAndRotations(c);
      });
  if (!all.ok()) return all.status();
  std::vector<Info> out;
  for (auto& r : (*all).*which) {
    out.push_back({.name = std::move(r.name), .options = r.options});
  }
  return out;
}

}  // namespace

Result<std::vector<RingInfo>> Store::ListRings() {
  return ListKind<RingInfo>(*impl_, &core::KindsRecord::rings);
}

Result<std::vector<RotationInfo>> Store::ListRotations() {
  return ListKind<RotationInfo>(*impl_, &core::KindsRecord::rotations);
}

Result<Tx> Store::BeginTx() {
  auto conn = impl_->engine().BeginTx();
  if (!conn.ok()) return conn.status();
  return Tx(std::make_unique<core::TxImpl>(impl_.get(), std::move(*conn),
                                           /*joined=*/false));
}

Result<Tx> Store::JoinTx(void* native_connection) {
  if (native_connection == nullptr) {
    return Status::InvalidArgument("JoinTx needs a connection, got null");
  }
  auto conn = impl_->engine().JoinTx(native_connection);
  if (!conn.ok()) return conn.status();
  return Tx(std::make_unique<core::TxImpl>(impl_.get(), std::move(*conn),
                                           /*joined=*/true));
}

Tx::Tx(std::unique_ptr<core::TxImpl> impl) : impl_(std::move(impl)) {}
Tx::Tx(Tx&&) noexcept = default;
Tx& Tx::operator=(Tx&&) noexcept = default;

Tx::~Tx() {
  if (!impl_ || impl_->conn() == nullptr) return;
  // A joined transaction stays the caller's to end: rolling it back here
  // would silently undo the caller's writes (or a later transaction of
  // theirs, had they already committed this one themselves).
  if (impl_->joined()) {
    impl_->Close();
    return;
  }
  (void)Rollback();
}

void* Tx::native_handle() const {
  if (!impl_ || impl_->conn() == nullptr) return nullptr;
  return impl_->store().engine().NativeHandle(*impl_->conn());
}

Status Tx::Commit() {
  if (!impl_ || impl_->conn() == nullptr) {
    return Status::FailedPrecondition("transaction is already closed");
  }
  if (!impl_->poisoned().ok()) {
    Status why = impl_->poisoned();
    (void)Rollback();
    return Status::FailedPrecondition(
        "transaction rolled back: an operation in it failed part-way (" +
        why.ToString() + ")");
  }
  auto conn = impl_->Close();
  Status s = impl_->store().engine().CommitTx(*conn);
  if (s.ok()) {
    for (auto [queue_id, n] : impl_->sent()) {
      impl_->store().hub().Notify(queue_id, n);
    }
  }
  return s;
}

Status Tx::Rollback() {
  if (!impl_ || impl_->conn() == nullptr) {
    return Status::FailedPrecondition("transaction is already closed");
  }
  auto conn = impl_->Close();
  return impl_->store().engine().RollbackTx(*conn);
}

}  // namespace sqlq
