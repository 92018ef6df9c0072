// Ring: validation and dispatch; the engine persists.
// docs/rings-and-rotations.md.

#include "sqlq/ring.h"

#include "core/store_impl.h"
#include "core/validate.h"

namespace sqlq {

using core::Conn;
using core::RingOps;

Ring::Ring(std::shared_ptr<core::RingImpl> impl) : impl_(std::move(impl)) {}
Ring::~Ring() = default;

const std::string& Ring::name() const { return impl_->record().name; }

Result<RingEntry> Ring::Push(std::string_view group, std::string_view payload) {
  Status s = core::ValidateKey("group", group);
  if (s.ok()) {
    s = core::ValidatePayload(payload,
                              impl_->record().options.max_payload_bytes);
  }
  if (!s.ok()) return s;
  return core::MergedWrite<RingEntry>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.PushToRing(conn, {impl_->id(), group, payload});
      });
}

Result<std::vector<RingEntry>> Ring::Read(std::string_view group,
                                          const RingReadOptions& options) {
  Status s = core::ValidateKey("group", group);
  if (s.ok()) s = core::ValidateList({.limit = options.limit});
  if (!s.ok()) return s;
  return core::SnapshotRead<std::vector<RingEntry>>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.ReadRing(conn, {impl_->id(), group, options});
      });
}

Result<std::vector<RingGroup>> Ring::Groups() {
  return core::SnapshotRead<std::vector<RingGroup>>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.ListRingGroups(conn, impl_->id());
      });
}

Status Ring::Delete(std::string_view group, std::int64_t seq) {
  Status s = core::ValidateKey("group", group);
  if (!s.ok()) return s;
  if (seq < 1) return Status::InvalidArgument("seq must be positive");
  return impl_->store().batcher().Run([&](Conn& conn) {
    return impl_->store().engine().DeleteRingEntry(conn,
                                                   {impl_->id(), group, seq});
  });
}

Result<std::int64_t> Ring::DeleteGroup(std::string_view group) {
  Status s = core::ValidateKey("group", group);
  if (!s.ok()) return s;
  return core::MergedWrite<std::int64_t>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.DeleteRingGroup(conn, {impl_->id(), group});
      });
}

Result<std::int64_t> Ring::SetCapacity(std::int64_t capacity) {
  RingOptions o = impl_->record().options;
  o.capacity = capacity;
  Status s = core::ValidateRingOptions(o);
  if (!s.ok()) return s;
  return core::MergedWrite<std::int64_t>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.SetRingCapacity(conn, {impl_->id(), capacity});
      });
}

Result<RingStats> Ring::Stats() {
  return core::SnapshotRead<RingStats>(
      impl_->store(), [&](RingOps& e, Conn& conn) {
        return e.GetRingStats(conn, impl_->id());
      });
}

}  // namespace sqlq
