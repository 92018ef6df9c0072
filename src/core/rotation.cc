// Rotation: validation, the parking rule, dispatch; the engine persists.
// docs/rings-and-rotations.md.

#include "sqlq/rotation.h"

#include <fmt/format.h>

#include "core/store_impl.h"
#include "core/validate.h"

namespace sqlq {

using core::Conn;
using core::RotationOps;

Rotation::Rotation(std::shared_ptr<core::RotationImpl> impl)
    : impl_(std::move(impl)) {}
Rotation::~Rotation() = default;

const std::string& Rotation::name() const { return impl_->record().name; }

Status Rotation::Add(std::string_view key, std::string_view payload) {
  Status s = core::ValidateKey("key", key);
  if (s.ok()) {
    s = core::ValidatePayload(payload,
                              impl_->record().options.max_payload_bytes);
  }
  if (!s.ok()) return s;
  return impl_->store().batcher().Run([&](Conn& conn) {
    return impl_->store().engine().AddToRotation(conn,
                                                 {impl_->id(), key, payload});
  });
}

Status Rotation::Remove(std::string_view key) {
  Status s = core::ValidateKey("key", key);
  if (!s.ok()) return s;
  return impl_->store().batcher().Run([&](Conn& conn) {
    return impl_->store().engine().RemoveFromRotation(conn, {impl_->id(), key});
  });
}

Result<std::vector<RotationItem>> Rotation::Next(int n) {
  if (n < 1 || n > core::kMaxNext) {
    return Status::InvalidArgument(
        fmt::format("n {} is out of range [1, {}]", n, core::kMaxNext));
  }
  // Merged writes run one after another in one transaction, so concurrent
  // callers see each other's stamps: no item is handed to two of them by
  // calls that overlap.
  return core::MergedWrite<std::vector<RotationItem>>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.ServeFromRotation(conn, {impl_->id(), n});
      });
}

Result<RotationItem> Rotation::Fail(std::string_view key) {
  Status s = core::ValidateKey("key", key);
  if (!s.ok()) return s;
  return core::MergedWrite<RotationItem>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.ReportRotationFailure(
            conn, {impl_->id(), key, impl_->record().options.max_failures});
      });
}

Result<RotationItem> Rotation::Ok(std::string_view key) {
  Status s = core::ValidateKey("key", key);
  if (!s.ok()) return s;
  return core::MergedWrite<RotationItem>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.ReportRotationSuccess(conn, {impl_->id(), key});
      });
}

Result<RotationItem> Rotation::Reset(std::string_view key) {
  Status s = core::ValidateKey("key", key);
  if (!s.ok()) return s;
  return core::MergedWrite<RotationItem>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.ResetRotationItem(conn, {impl_->id(), key});
      });
}

Result<std::vector<RotationItem>> Rotation::List() {
  return core::SnapshotRead<std::vector<RotationItem>>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.ListRotationItems(conn, impl_->id());
      });
}

Result<RotationStats> Rotation::Stats() {
  return core::SnapshotRead<RotationStats>(
      impl_->store(), [&](RotationOps& e, Conn& conn) {
        return e.GetRotationStats(conn, impl_->id());
      });
}

}  // namespace sqlq
