// SQL that every engine runs as it is, SQLite included (no placeholders, no
// dialect): kept here once rather than in each engine.

#ifndef SQLQ_ENGINES_SHARED_KINDS_SQL_H_
#define SQLQ_ENGINES_SHARED_KINDS_SQL_H_

namespace sqlq::engines {

// Every ring and rotation, by name, in the columns core::DecodeKind reads.
inline constexpr const char* kListKindsSql =
    "SELECT id, name, kind, capacity, max_failures, max_payload "
    "FROM sqlq_queues WHERE kind IN ('ring', 'rotation') ORDER BY name";

}  // namespace sqlq::engines

#endif  // SQLQ_ENGINES_SHARED_KINDS_SQL_H_
