// The errors a user reads, built once for every engine. An engine finds
// out what happened (a row missing, a lease token that differs) in its own
// SQL and calls one of these to say so; it never words a domain error
// itself. Its own native errors (a deadlock, a lost connection) it
// translates in its connection's Translate.

#ifndef SQLQ_CORE_ERRORS_H_
#define SQLQ_CORE_ERRORS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/receipt.h"
#include "sqlq/status.h"

namespace sqlq::core {

// kNotFound: the queue was dropped while a handle to it was held.
Status QueueGone(std::int64_t queue_id);
// kNotFound: no schedule has this name.
Status ScheduleMissing(std::string_view name);
// kNotFound: the same for a ring or rotation (`kind` "ring", "rotation").
Status KindGone(std::string_view kind, std::int64_t id);
// Why `name` cannot be opened as a `want` ("queue", "ring", "rotation"):
// kFailedPrecondition naming `found_kind` when the name belongs to another
// kind of thing, kNotFound when nothing has that name.
Status NotA(std::string_view name, std::optional<std::string_view> found_kind,
            std::string_view want);
// kAlreadyExists: the name is taken (by `kind`; nullopt when the holder was
// dropped again since, which still counts as taken).
Status NameTaken(std::string_view name, std::optional<std::string_view> kind);

// kNotFound: the receipt's message is no longer in its queue.
Status NotInQueue(std::int64_t message_id);
// kFailedPrecondition: the message is there, but under another lease than
// the receipt's; `token` and `attempts` are the message's now (token 0:
// not leased).
Status StaleReceipt(const Receipt& r, std::int64_t token,
                    std::int64_t attempts);

// Rings and rotations.
Status NoRingEntry(std::string_view group, std::int64_t seq);
Status NoItem(std::string_view key);
Status ItemExists(std::string_view key);
Status ItemParked(std::string_view key);

// Opening a database: kFailedPrecondition for a schema newer than this
// build knows; kNotFound for a database without sqlq's tables when the
// caller asked not to create them (`where` names it).
Status SchemaTooNew(std::int64_t found, std::int64_t supported);
Status NoSqlqTables(std::string_view where);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_ERRORS_H_
