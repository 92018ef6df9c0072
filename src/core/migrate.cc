#include "core/migrate.h"

#include <fmt/format.h>

#include "core/errors.h"

namespace sqlq::core {

namespace {

Status MigrateLocked(MigrationTarget& t) {
  if (Status s = t.Lock(); !s.ok()) return s;
  if (Status s = t.CreateSchemaTable(); !s.ok()) return s;
  auto version = t.RecordedVersion();
  if (!version.ok()) return version.status();
  if (*version > t.latest()) return SchemaTooNew(*version, t.latest());
  for (std::int64_t v = *version + 1; v <= t.latest(); ++v) {
    if (Status s = t.Apply(v); !s.ok()) {
      return s.WithContext(fmt::format("migrate schema to version {}", v));
    }
    if (Status s = t.Record(v); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace

Status Migrate(MigrationTarget& t, bool create) {
  if (Status s = t.Begin(); !s.ok()) return s;
  auto seen = t.RecordedVersion();
  if (!seen.ok()) return t.Finish(seen.status());
  if (*seen > t.latest()) return t.Finish(SchemaTooNew(*seen, t.latest()));
  if (*seen == t.latest()) return t.Finish(Status::Ok());
  if (*seen == 0 && !create) return t.Finish(NoSqlqTables(t.where()));
  return t.Finish(MigrateLocked(t));
}

}  // namespace sqlq::core
