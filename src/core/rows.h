// Reading sqlq's rows into the public structs, once for every engine. The
// engines select the same columns in the same order (the column lists
// below); each passes a Row that reads a column of the current row:
//   std::int64_t Int(int col) const;
//   std::string Bytes(int col) const;   // text or binary
//   bool IsNull(int col) const;
// RowAt adapts a result set read by (row, col), as the server engines'
// Rows are. Also the conversions between times and the integers of
// microseconds the tables store.

#ifndef SQLQ_CORE_ROWS_H_
#define SQLQ_CORE_ROWS_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/columns.h"
#include "core/engine.h"

namespace sqlq::core {

inline std::int64_t Us(Timestamp t) { return t.time_since_epoch().count(); }
inline Timestamp FromUs(std::int64_t us) { return Timestamp(Micros(us)); }
inline std::int64_t Us(Duration d) {
  return std::chrono::duration_cast<Micros>(d).count();
}
inline Duration DurationFromUs(std::int64_t us) {
  return std::chrono::duration_cast<Duration>(Micros(us));
}
// Lease tokens are unsigned 64-bit; the tables store them as the signed
// 64-bit integer with the same bits.
inline std::int64_t TokenBits(std::uint64_t t) {
  return static_cast<std::int64_t>(t);
}

// Row `i` of a result set read by (row, col).
template <class Rows>
struct RowAt {
  const Rows& rows;
  int i;
  std::int64_t Int(int col) const { return rows.Int(i, col); }
  std::string Bytes(int col) const { return rows.Bytes(i, col); }
  bool IsNull(int col) const { return rows.IsNull(i, col); }
};

// A row read from its column `shift` on: the columns a decoder knows,
// after others of the same statement.
template <class Row>
struct ShiftedRow {
  const Row& row;
  int shift;
  std::int64_t Int(int col) const { return row.Int(col + shift); }
  std::string Bytes(int col) const { return row.Bytes(col + shift); }
  bool IsNull(int col) const { return row.IsNull(col + shift); }
};

// Every row of `rows` decoded by `decode(RowAt)`.
template <class Rows, class Decode>
auto DecodeAll(const Rows& rows, Decode decode) {
  std::vector<decltype(decode(RowAt<Rows>{rows, 0}))> out;
  out.reserve(static_cast<std::size_t>(rows.size()));
  for (int i = 0; i < rows.size(); ++i)
    out.push_back(decode(RowAt<Rows>{rows, i}));
  return out;
}

// The group a message is stored in (SendParams::grouped): its own, else
// "" in a grouped queue, else none (NULL).
inline std::optional<std::string_view> GroupOf(const Message& m, bool grouped) {
  if (!m.group.empty() || grouped) return std::string_view(m.group);
  return std::nullopt;
}

// What DecodeQueue reads, in its order: group_mode is 0 none, 1 fair,
// 2 ordered; the limits are 0 for none, rate_u claims per second times 10^6;
// dead_letter_queue '' for none; labels EncodeHeaders' text, NULL for none.
inline constexpr const char* kQueueColumns =
    "id, name, max_attempts, lease_us, backoff_base_us, backoff_max_us, "
    "archive, retention_us, max_payload, created_us, paused, "
    "dead_retention_us, unique_for_us, group_mode, max_leased, rate_u, "
    "rate_burst, group_limit, dead_letter_queue, labels";
// `columns` (a list as kQueueColumns, ", " between names) with each name
// qualified by `table`, for a statement that joins sqlq_queues twice.
inline std::string QualifiedColumns(std::string_view table,
                                    std::string_view columns) {
  std::string out;
  std::size_t begin = 0;
  while (begin < columns.size()) {
    std::size_t end = columns.find(", ", begin);
    if (end == std::string_view::npos) end = columns.size();
    if (!out.empty()) out += ", ";
    out.append(table).append(".").append(columns.substr(begin, end - begin));
    begin = end + 2;
  }
  return out;
}
inline constexpr double kRateScale = 1e6;

// A limit as a column holds it: 0 for none.
inline std::int64_t LimitColumn(const std::optional<int>& v) {
  return v.value_or(0);
}
inline std::int64_t RateColumn(const std::optional<double>& rate) {
  return rate ? std::llround(*rate * kRateScale) : 0;
}
inline std::optional<int> LimitFromColumn(std::int64_t v) {
  if (v == 0) return std::nullopt;
  return static_cast<int>(v);
}

template <class Row>
QueueRecord DecodeQueue(const Row& r) {
  QueueRecord q;
  q.id = r.Int(0);
  q.info.name = r.Bytes(1);
  q.info.options.max_attempts = static_cast<int>(r.Int(2));
  q.info.options.lease = DurationFromUs(r.Int(3));
  q.info.options.backoff_base = DurationFromUs(r.Int(4));
  q.info.options.backoff_max = DurationFromUs(r.Int(5));
  q.info.options.archive = r.Int(6) != 0;
  q.info.options.retention = DurationFromUs(r.Int(7));
  q.info.options.max_payload_bytes = static_cast<std::size_t>(r.Int(8));
  q.info.created_at = FromUs(r.Int(9));
  q.info.paused = r.Int(10) != 0;
  q.info.options.dead_retention = DurationFromUs(r.Int(11));
  q.info.options.unique_for = DurationFromUs(r.Int(12));
  q.info.options.groups = static_cast<GroupMode>(r.Int(13));
  q.info.options.max_leased = LimitFromColumn(r.Int(14));
  if (r.Int(15) != 0) {
    q.info.options.rate_limit = static_cast<double>(r.Int(15)) / kRateScale;
  }
  q.info.options.rate_burst = LimitFromColumn(r.Int(16));
  q.info.options.group_limit = LimitFromColumn(r.Int(17));
  q.info.options.dead_letter_queue = r.Bytes(18);
  if (!r.IsNull(19)) q.info.options.labels = DecodeHeaders(r.Bytes(19));
  return q;
}

// What DecodeSchedule reads, in its order (times in microseconds, 0 for
// none; headers JSON text or NULL, grp NULL when none).
inline constexpr const char* kScheduleColumns =
    "id, name, cron, time_zone, queue, payload, priority, headers, grp, "
    "catch_up, paused, next_us, last_us, sent, skipped, last_error, "
    "created_us";

template <class Row>
ScheduleRecord DecodeSchedule(const Row& r) {
  ScheduleRecord s;
  s.id = r.Int(0);
  ScheduleInfo& i = s.info;
  i.name = r.Bytes(1);
  i.options.cron = r.Bytes(2);
  i.options.time_zone = r.Bytes(3);
  i.options.queue = r.Bytes(4);
  i.options.message.payload = r.Bytes(5);
  i.options.message.priority = static_cast<std::int32_t>(r.Int(6));
  if (!r.IsNull(7)) {
    i.options.message.headers = DecodeJob(r.Bytes(7), i.options.message);
  }
  if (!r.IsNull(8)) i.options.message.group = r.Bytes(8);
  i.options.catch_up = static_cast<int>(r.Int(9));
  i.paused = r.Int(10) != 0;
  if (r.Int(11) != 0) i.next_tick = FromUs(r.Int(11));
  if (r.Int(12) != 0) i.last_tick = FromUs(r.Int(12));
  i.sent = r.Int(13);
  i.skipped = r.Int(14);
  if (!r.IsNull(15)) i.last_error = r.Bytes(15);
  i.created_at = FromUs(r.Int(16));
  return s;
}

// id, name, kind ('ring' or 'rotation'), capacity, max_failures,
// max_payload: appended to the rings or the rotations of `out`.
template <class Row>
void DecodeKind(const Row& r, KindsRecord& out) {
  const std::int64_t id = r.Int(0);
  std::string name = r.Bytes(1);
  const auto max_payload = static_cast<std::size_t>(r.Int(5));
  if (r.Bytes(2) == "ring") {
    out.rings.push_back(
        {.id = id,
         .name = std::move(name),
         .options = {.capacity = r.Int(3), .max_payload_bytes = max_payload}});
  } else {
    out.rotations.push_back(
        {.id = id,
         .name = std::move(name),
         .options = {.max_failures = static_cast<int>(r.Int(4)),
                     .max_payload_bytes = max_payload}});
  }
}

// name, sends, claims, acks, nacks, expirations, dead_lettered, ready,
// delayed, leased, oldest ready time (NULL: none ready), dead, archived,
// waiting, expired;
// `now_us` is the time the counts were taken at.
template <class Row>
QueueStats DecodeStats(const Row& r, std::int64_t now_us) {
  QueueStats s;
  s.name = r.Bytes(0);
  s.sends = r.Int(1);
  s.claims = r.Int(2);
  s.acks = r.Int(3);
  s.nacks = r.Int(4);
  s.expirations = r.Int(5);
  s.dead_lettered = r.Int(6);
  s.ready = r.Int(7);
  s.delayed = r.Int(8);
  s.leased = r.Int(9);
  if (!r.IsNull(10)) s.oldest_ready_age = DurationFromUs(now_us - r.Int(10));
  s.dead = r.Int(11);
  s.archived = r.Int(12);
  s.waiting = r.Int(13);
  s.expired = r.Int(14);
  return s;
}

// The JSON columns (columns.h) as text; NULL reads as empty.
template <class Row>
std::string JsonText(const Row& r, int col) {
  return r.IsNull(col) ? std::string() : r.Bytes(col);
}

// id, priority, attempts, enqueued_us, died_us, last_error, payload,
// headers, errors
template <class Row>
DeadLetter DecodeDead(const Row& r) {
  DeadLetter d{.id = r.Int(0),
               .priority = static_cast<std::int32_t>(r.Int(1)),
               .payload = r.Bytes(6),
               .attempts = static_cast<int>(r.Int(2)),
               .last_error = r.Bytes(5),
               .enqueued_at = FromUs(r.Int(3)),
               .died_at = FromUs(r.Int(4)),
               .errors = DecodeErrors(JsonText(r, 8))};
  d.headers = DecodeJob(JsonText(r, 7), d);
  return d;
}

// id, priority, attempts, enqueued_us, completed_us, worker, payload,
// headers, errors
template <class Row>
ArchivedMessage DecodeArchived(const Row& r) {
  ArchivedMessage a{.id = r.Int(0),
                    .priority = static_cast<std::int32_t>(r.Int(1)),
                    .payload = r.Bytes(6),
                    .attempts = static_cast<int>(r.Int(2)),
                    .worker = r.Bytes(5),
                    .enqueued_at = FromUs(r.Int(3)),
                    .completed_at = FromUs(r.Int(4)),
                    .errors = DecodeErrors(JsonText(r, 8))};
  a.headers = DecodeJob(JsonText(r, 7), a);
  return a;
}

// A found message (engines/shared/message_sql.h): id, priority, attempts,
// enqueued_us, ready_us, token, dedup, worker, last_error, payload,
// headers, errors, left_us, grp, snoozes; its state read against `now_us`.
template <class Row>
MessageInfo DecodeMessageInfo(const Row& r, MessageTable table,
                              std::int64_t now_us) {
  MessageInfo m;
  m.id = r.Int(0);
  m.priority = static_cast<std::int32_t>(r.Int(1));
  m.attempts = static_cast<int>(r.Int(2));
  m.enqueued_at = FromUs(r.Int(3));
  if (!r.IsNull(6)) m.dedup_key = r.Bytes(6);
  if (!r.IsNull(7)) m.worker = r.Bytes(7);
  if (!r.IsNull(8)) m.last_error = r.Bytes(8);
  m.payload = r.Bytes(9);
  m.headers = DecodeJob(JsonText(r, 10), m);
  m.errors = DecodeErrors(JsonText(r, 11));
  if (!r.IsNull(13)) m.group = r.Bytes(13);
  m.snoozes = static_cast<int>(r.Int(14));
  switch (table) {
    case MessageTable::kQueued: {
      const std::int64_t ready = r.Int(4);
      const bool leased = r.Int(5) != 0;
      if (!leased && ready >= kWaitingUs) {
        m.state = MessageState::kWaiting;  // no time of its own yet
        break;
      }
      m.ready_at = FromUs(ready);
      if (leased) m.lease_expires_at = FromUs(ready);
      m.state = ready <= now_us ? MessageState::kReady
                : leased        ? MessageState::kLeased
                                : MessageState::kDelayed;
      break;
    }
    case MessageTable::kDead:
      m.state = MessageState::kDead;
      m.died_at = FromUs(r.Int(12));
      break;
    case MessageTable::kArchived:
      m.state = MessageState::kArchived;
      m.completed_at = FromUs(r.Int(12));
      break;
  }
  return m;
}

// When a message may first be claimed, as engines store it: the later of
// (now + delay) and this, which is 0 unless the message has a run_at.
inline std::int64_t NotBeforeUs(const Message& m) {
  return m.run_at ? Us(*m.run_at) : 0;
}

// seq, pushed_us, payload (of `group`)
template <class Row>
RingEntry DecodeRingEntry(const Row& r, std::string_view group) {
  return {.seq = r.Int(0),
          .group = std::string(group),
          .payload = r.Bytes(2),
          .pushed_at = FromUs(r.Int(1))};
}

// name, capacity, pushes, groups, entries
template <class Row>
RingStats DecodeRingStats(const Row& r) {
  RingStats s;
  s.name = r.Bytes(0);
  s.capacity = r.Int(1);
  s.pushes = r.Int(2);
  s.groups = r.Int(3);
  s.entries = r.Int(4);
  return s;
}

// key, payload, served, failures, parked
template <class Row>
RotationItem DecodeItem(const Row& r) {
  return {.key = r.Bytes(0),
          .payload = r.Bytes(1),
          .served = r.Int(2),
          .failures = static_cast<int>(r.Int(3)),
          .parked = r.Int(4) != 0};
}

// name, max_failures, serves, items, parked
template <class Row>
RotationStats DecodeRotationStats(const Row& r) {
  RotationStats s;
  s.name = r.Bytes(0);
  s.max_failures = static_cast<int>(r.Int(1));
  s.serves = r.Int(2);
  s.items = r.Int(3);
  s.parked = r.Int(4);
  return s;
}

}  // namespace sqlq::core

#endif  // SQLQ_CORE_ROWS_H_
