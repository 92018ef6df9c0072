// The MariaDB/MySQL engine class, shared by the files that implement
// it by concern (mysql_engine.cc, mysql_queue.cc, mysql_claim.cc,
// mysql_migrate.cc). Rings, rotations and the rest of what it shares with
// the PostgreSQL engine are in engines/shared/, with MariaDB's SQL for them
// in dialect.h and mysql_shared.cc. Internal: included by those files
// only.
//
// The MariaDB/MySQL engine. Design notes: docs/engines/mysql.md.
//
// Connections: a pool of Connector/C connections, each with its own binary
// prepared statements and session settings chosen here (sql_mode, time
// zone, isolation, lock wait timeout), so that any server configuration
// behaves the same. Write() does not serialise: the core's WriteBatcher
// merges one process's writes, and transactions contend only on the rows
// they touch. Write transactions run at READ COMMITTED (REPEATABLE READ
// when the server logs in STATEMENT format, which refuses READ COMMITTED);
// reads run in a REPEATABLE READ READ ONLY snapshot.
//
// Deadlocks (1213) and lock wait timeouts (1205) roll the transaction back;
// Write() runs it again (core::RetryPolicy, core/tx_conn.h), so they do not
// reach the caller.
//
// Clean failures (engine.h): operations check their preconditions with
// reads before they write. The one expected failing statement, a duplicate
// key (dedup key, queue name), is rolled back by InnoDB as a statement and
// leaves the transaction usable; any other failed statement is remembered
// (MyConn::tx_error) and the transaction is then never committed.
//
// Replication: every statement that writes picks its rows by primary key
// or by a total order, and no write uses LIMIT, so statement-based replicas
// apply the same changes (docs/engines/mysql.md lists what MariaDB marks
// unsafe and what we do instead).
//
// Time: the database clock, NOW(6), read once per transaction, unless
// StoreOptions::clock is set; either way every statement gets "now" as a
// parameter.

#ifndef SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_IMPL_H_
#define SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_IMPL_H_

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/migrate.h"
#include "core/rows.h"
#include "core/tx_conn.h"
#include "core/url_params.h"
#include "engines/entry.h"
#include "engines/mysql/dialect.h"
#include "engines/mysql/my_conn.h"
#include "engines/mysql/poller.h"
#include "engines/mysql/schema.h"
#include "engines/shared/pooled_sql_engine.h"

namespace sqlq::engines::mysql {

using core::Conn;
using core::Micros;

// Rows per multi-row INSERT, and bytes of payload per INSERT (well below
// the server's max_allowed_packet, 16 MiB by default).
constexpr std::size_t kMaxInsertRows = 256;
constexpr std::size_t kMaxInsertBytes = 4 << 20;
// Bytes of payload and headers a send may have to go in one packet
// (SendAndCommit), written there as hex (twice as many).
constexpr std::size_t kPacketSendBytes = 256 << 10;
// At most this many messages or receipts go to the group's procedure in one
// CALL (kClaimsCommitted; its receipts travel as JSON text, and groups
// larger than this were not measured); larger claims and batches of acks
// go the general way.
constexpr std::int64_t kCallClaimMax = 64;

// The session every connection gets, whatever the server's defaults: a
// strict sql_mode without ANSI_QUOTES, PIPES_AS_CONCAT,
// NO_BACKSLASH_ESCAPES or SIMULTANEOUS_ASSIGNMENT (the SQL here does not
// depend on any of them, but a user's joined connection may have them);
// UTC; a short lock wait, as no sqlq statement waits long on a row by
// design.
constexpr const char* kSessionSql =
    "SET SESSION sql_mode = "
    "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', "
    "time_zone = '+00:00', innodb_lock_wait_timeout = 5, autocommit = 1";

using core::FromUs;
using core::TokenBits;
using core::Us;

// Connection parameters from the URL.
struct ConnParams {
  struct Server {
    std::string host = "localhost";
    unsigned int port = 3306;
  };
  // Tried in order; with several, only a server that takes writes is
  // taken (MysqlEngine::ConnectRaw).
  std::vector<Server> servers{Server{}};
  std::string user;
  std::string password;
  std::string database;
  std::string socket;
  std::string ssl = "prefer";  // disable, prefer, require, verify-ca/full
  std::string ssl_ca, ssl_cert, ssl_key;
  unsigned int connect_timeout = 10;
  // Seconds a read or a write on the connection may wait for the server
  // (Connector/C's MYSQL_OPT_READ_TIMEOUT, MYSQL_OPT_WRITE_TIMEOUT): a call
  // on a server that went dark fails after this instead of hanging until
  // the kernel gives up. sqlq's statements never wait long on the server
  // (innodb_lock_wait_timeout is 5 s in its sessions), except migrations
  // and index builds, which run on connections without a read timeout.
  unsigned int read_timeout = 30;
  unsigned int write_timeout = 30;
  // core::RetryPolicy::failover_wait; -1: the default (core::FailoverWaitFor).
  std::int64_t failover_wait_ms = -1;
  // Tuning (docs/engines/mysql.md): group commits run at once.
  int write_groups = 1;
};

// What counters `d` add to the sum the wake-up poll watches (kWakeSum).
inline std::int64_t WakeBumps(const QueueCounters& d) {
  return d.sends + d.nacks + d.acks + d.dead_lettered;
}

class MysqlEngine : public shared::PooledSqlEngine<Dialect> {
 public:
  MysqlEngine(ConnParams params, std::shared_ptr<Clock> clock)
      : PooledSqlEngine(std::move(clock), [this] { return Connect(); }),
        params_(std::move(params)) {
    pool_.set_failover_wait(core::FailoverWaitFor(params_.failover_wait_ms,
                                                  params_.servers.size() > 1));
  }

  ~MysqlEngine() override { poller_.reset(); }

  Status Init(bool create_if_missing) {
    return core::WithFailoverWait(pool_.policy(), [&]() -> Status {
      // Not pooled afterwards: it has no read timeout.
      auto conn = Connect(Reads::kUnbounded);
      if (!conn.ok()) return conn.status();
      Status s = Migrate(**conn, create_if_missing);
      if (!s.ok()) return s;
      s = FindRoutines(**conn);
      if (!s.ok()) return s;
      return FindDedupIndex(**conn);
    });
  }

  const shared::MessageSqlStyle& MessageStyle() const override {
    return dedup_keys_apart_ ? Dialect::kMessageStyleKeysApart
                             : Dialect::kMessageStyle;
  }

  // --- transactions -------------------------------------------------------

  Status Write(const std::function<Status(Conn&)>& body) override;

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override;

  Status RollbackTx(Conn& c) override;

  void* NativeHandle(Conn& c) override;

  void SetWaitingProbe(std::function<std::size_t()> waiting) override;

  void WatchForeignWrites(std::function<void()> changed) override;
  bool WatchingForeignWrites() const override {
    return poller_ != nullptr && poller_->watching();
  }

  // Makes the group index when it is missing (schema.h, version 8).
  Status PrepareGroups() override;

  // --- queues --------------------------------------------------------------

  Status TouchSchema(Conn& c) override;

  Status DropQueue(Conn& c, std::int64_t queue_id) override;

  // --- messages ------------------------------------------------------------

  // INSERT of `n` messages without dedup keys, prepared once per n (see
  // Send); `grouped`: with their groups too (a column more); `keyed`: with
  // their dedup keys (NULL for none) last.
  static const std::string& InsertSql(std::size_t n, bool grouped,
                                      bool keyed = false);

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override;
  // One round trip for a group of concurrent senders: the transaction's
  // begin, its clock read into a session variable, one multi-row INSERT,
  // the counters and COMMIT go to the server as one packet of statements
  // (MyConn::ExecCommit), with the messages written into the INSERT's text
  // as hex literals, which hold nothing but hex digits; where dedup keys
  // are held apart (dedup_keys_apart_), the keys go in the same packet
  // (PacketSend::Keys), and a key taken rolls it back and sends the way of
  // any write, which tells the duplicates. Only for sends without dedup
  // keys (or with them, so) and without a dedup window, within
  // kPacketSendBytes, on the database's clock, on a server that hands a
  // multi-row INSERT consecutive ids; others go the way of any write.
  Result<std::vector<SendResult>> SendAndCommit(
      const core::SendParams& to, const MessagesFn& messages) override;
  // A send that goes as one INSERT of literals in a packet of statements
  // (SendAndCommit, SendsAndClaimAndCommit): each message's headers
  // encoded, the payload bytes, and whether the INSERT has a group column.
  struct PacketSend {
    std::vector<std::string> headers;
    std::size_t bytes = 0;
    bool grouped = false;
    // A message has a dedup key: the INSERT has a dedup column, and Keys
    // stores them.
    bool keyed = false;
    // The INSERT of p's messages, on the clock in @sqlq_now (kSetNow), or
    // on `now` where given.
    std::string Insert(const core::SendParams& p,
                       std::optional<std::int64_t> now = std::nullopt) const;
    // Right after Insert, the INSERT of their keys into sqlq_dedup_keys,
    // ids `step` apart.
    std::string Keys(const core::SendParams& p, std::int64_t step) const;
  };
  // nullopt for a send that cannot go so: a store with its own clock, a
  // dedup key (unless `keys_ok` where they are held apart and the queue
  // has no dedup window), no message, or more than kPacketSendBytes.
  std::optional<PacketSend> PacketSendOf(const core::SendParams& p,
                                         bool keys_ok = false) const;
  // Reads the database's clock into @sqlq_now, with its "; ".
  static constexpr const char* kSetNow =
      "SET @sqlq_now = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED); ";
  // Multi-row INSERTs over every queue when no message has a dedup key and
  // no queue a dedup window; else (and when a queue is gone) Send for each.
  Result<std::vector<SentTo>> SendEach(
      Conn& c, std::span<const core::SendParams> sends) override;

  // Claim, in up to a few short rounds:
  //  1. a plain (non-locking) read of candidate ids in claim order through
  //     the index sqlq_messages_claim (queue_id, npriority, ready_us, id):
  //     no filesort, no locks, so it never waits (the test
  //     ClaimReadsTheIndexInOrder checks the plan);
  //  2. SELECT ... WHERE id IN (candidates) ... FOR UPDATE SKIP LOCKED,
  //     which locks by primary key only the candidates that are still
  //     claimable, skipping rows other consumers hold;
  //  3. UPDATE (or dead-letter) by primary key.
  // A filesort under FOR UPDATE would lock every row it scanned; here the
  // locking read touches only the candidates. MariaDB has no
  // UPDATE ... RETURNING, hence the separate statements; the SQLite engine
  // reads and updates under its database-wide write lock, the PostgreSQL
  // one does it all in one statement.
  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override;
  // A claim after the acks of its receipts (a consumer's ack and claim
  // next, either alone, or a group's) as one CALL where the schema has the
  // procedures: one round trip, the statements run inside the server; one
  // message after one receipt with kClaimCommitted, up to kCallClaimMax
  // of each with kClaimsCommitted. Not for groups, dedup windows,
  // archives, a byte budget on a claim of more than one, a queue whose
  // acks release dependents, a store with its own clock, or Galera (whose
  // wait for the cluster goes with a BEGIN the client sends): those, and
  // whatever the procedure hands back, go the general way.
  Result<std::optional<ClaimCommitted>> ClaimAndCommit(
      const core::ClaimParams& p, const core::AckManyParams& acks,
      std::span<const int> gates) override;
  // The sends first, as one INSERT (PacketSendOf), then the CALL of
  // kClaimsCommitted, in one packet: one round trip for a group of
  // producers and consumers. What the procedure hands back is undone to
  // its savepoint and the sends are committed alone; the claim then goes
  // the general way.
  Result<std::optional<ClaimCommitted>> SendsAndClaimAndCommit(
      SendsFirst& sends, const core::ClaimParams& p,
      const core::AckManyParams& acks, std::span<const int> gates) override;

  // ClaimAndCommit of at most one message after at most one receipt, as
  // one CALL of kClaimCommitted.
  Result<std::optional<ClaimCommitted>> ClaimOneAndCommit(
      const core::ClaimParams& p, const core::AckManyParams& acks);
  // What a claim procedure's first column answered: nullopt, done; else
  // nothing of it was done: the queue is gone (that error), or Ok for the
  // general way to take it (a queue whose acks release dependents is
  // remembered).
  std::optional<Status> HandedBack(std::int64_t answer, std::int64_t queue_id);
  // Where the group's procedure can take a claim with its acks (not
  // groups, dedup windows, archives, a byte budget on a claim of more
  // than one, more than kCallClaimMax messages or receipts, a store with
  // its own clock, or a queue whose acks release dependents).
  bool ClaimCallTakes(const core::ClaimParams& p,
                      const core::AckManyParams& acks);
  // ClaimAndCommit's and SendsAndClaimAndCommit's CALL on `c`, after
  // `prefix`: nothing, or the `before` statements that begin the
  // transaction and store `sends` (sends->sent is set from the INSERT at
  // `before - 2` once they are committed). An empty result: the procedure
  // handed the claim back, or is gone (the general way).
  Result<std::optional<ClaimCommitted>> ClaimCall(
      MyConn& c, const core::ClaimParams& p, const core::AckManyParams& acks,
      const std::string& prefix, std::size_t before, SendsFirst* sends);

  // Moves locked messages whose attempts ran out to the dead letters.
  Status BuryExhausted(MyConn& conn, const std::vector<std::int64_t>& ids,
                       std::int64_t now, const core::ClaimParams& p) override;

  // Holds the dedup keys of messages `ids` (locked by this transaction,
  // about to leave the queue) for `unique_for`; nothing when it is 0.
  Status HoldLocked(MyConn& conn, std::int64_t queue_id,
                    const std::vector<std::int64_t>& ids,
                    core::Micros unique_for);

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override;

  // Locks the message if the receipt names its current lease.
  Result<bool> LockLeased(MyConn& conn, std::int64_t queue_id,
                          const core::Receipt& r);

  Status Ack(Conn& c, const core::AckParams& p) override;

  // Acks receipts [at, end) in one statement on MariaDB: the rows whose
  // lease matches a receipt are deleted and returned; each receipt that
  // matched none gets one look-up that says why (the common batch, all
  // current, is one statement where the portable way takes two: lock and
  // check, then delete). Returns how many messages were acked.
  Result<std::int64_t> DeleteReturning(MyConn& conn, std::int64_t queue_id,
                                       std::span<const core::Receipt> receipts,
                                       std::size_t at, std::size_t end,
                                       const std::vector<std::int64_t>& ids,
                                       std::vector<Status>& out);

  // Acks a batch in a fixed number of statements whatever its size: on
  // MariaDB, for a queue without archive or dedup window, one DELETE ...
  // RETURNING per page (DeleteReturning); otherwise
  // lock the messages by primary key, check each receipt against its row,
  // delete (or archive) the matching ones by id.
  Result<std::vector<Status>> AckMany(Conn& c,
                                      const core::AckManyParams& op) override;

  // One group commit in flight per process (URL parameter write_groups
  // overrides).
  // With 4, as on PostgreSQL, a process's own groups deadlock with each other
  // under REPEATABLE READ (a transaction that keeps losing then runs alone,
  // core::RetryPolicy), and 4 measured no faster than 1 for mixed
  // (docs/engines/mysql.md).
  int write_groups() const override;

  Status Retry(Conn& c, const core::RetryParams& p) override;

  Status Bury(Conn& c, const core::BuryParams& p) override;
  Result<std::int64_t> Cancel(Conn& c, const core::CancelParams& p) override;

  Result<Timestamp> Extend(Conn& c, const core::ExtendParams& op) override;

  // --- dead letters (listing them and the archive: engines/shared) --------

  Result<std::int64_t> MoveDeadLetters(MyConn& conn,
                                       const core::RedriveParams& op,
                                       std::int64_t to,
                                       std::int64_t now) override;

 private:
  static constexpr const char* kCounterInsert =
      "INSERT INTO sqlq_counters (queue_id, slot, sends, claims, acks, nacks, "
      "expirations, dead_lettered, pushes, serves, expired)";
  static constexpr const char* kCounterUpdate =
      "ON DUPLICATE KEY UPDATE sends = sends + VALUES(sends), "
      "claims = claims + VALUES(claims), acks = acks + VALUES(acks), "
      "nacks = nacks + VALUES(nacks), "
      "expirations = expirations + VALUES(expirations), "
      "dead_lettered = dead_lettered + VALUES(dead_lettered), "
      "pushes = pushes + VALUES(pushes), serves = serves + VALUES(serves), "
      "expired = expired + VALUES(expired)";

  // One of the queue's kCounterSlots rows, chosen by connection id, so that
  // concurrent transactions rarely update the same row. The table has one
  // unique key, so the upsert is safe for statement-based replication.
  Status WriteCounters(MyConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) override;

  // START TRANSACTION, with the database clock read in the same round trip
  // when the store uses it.
  Status StartTransaction(MyConn& conn, bool read_only);
  // The statements that begin a write transaction without reading the
  // clock (with Galera's wait for the cluster's earlier writes): one, or
  // three on a Galera node.
  static const char* BeginSql(const MyConn& conn);

  Status Commit(MyConn& conn) override;

  // The counters gathered in the transaction (pending_counters), in queue
  // id order (so that two transactions lock counter rows in the same
  // order), as one upsert followed by "; ", to go with its COMMIT; empty
  // when there are none. Its text holds only integers of ours, formatted
  // here, never caller input. Clears them and adds their wake-up bumps.
  std::string TakeCounters(MyConn& conn);

  // Write's transaction on a connection of the pool.
  Status WriteOn(MyConn& c, const std::function<Status(Conn&)>& body);

  // StartTransaction for a connection from the pool: a failed BEGIN leaves
  // no error recorded for the transaction that follows.
  Status Begin(MyConn& conn, bool read_only) override;

  Status InTransaction(MyConn& conn,
                       const std::function<Status(Conn&)>& body) override;

  // A raw connection with the session set up, or null with `error` set.
  struct RawDeleter {
    void operator()(MYSQL* m) const { mysql_close(m); }
  };
  using RawConn = std::unique_ptr<MYSQL, RawDeleter>;

  // kBounded: reads wait at most ConnParams::read_timeout. kUnbounded: for
  // statements that may rightly run long (a migration waiting for the
  // migration lock or altering a large table, an index build), on
  // connections that are never pooled.
  enum class Reads { kBounded, kUnbounded };

  // A connection to the URL's server, or with several to the first that
  // takes writes (not read-only; under Galera, synced).
  RawConn ConnectRaw(unsigned int timeout, Status* error = nullptr,
                     Reads reads = Reads::kBounded);
  RawConn ConnectTo(const ConnParams::Server& server, unsigned int timeout,
                    Status* error, Reads reads);

  // Reads what the engine needs to know about the session, and sets the
  // isolation level of a connection of ours.
  Status ReadSession(MyConn& conn);

  Result<std::unique_ptr<MyConn>> Connect(Reads reads = Reads::kBounded);

  void Release(std::unique_ptr<MyConn> conn);

  // --- migrations ------------------------------------------------------------

  // Brings the schema to kSchemaVersion (core/migrate.h) under
  // GET_LOCK: DDL commits at once in MariaDB, so a transaction cannot
  // serialise concurrent processes.
  Status Migrate(MyConn& conn, bool create);

  // Whether the schema has the send's and the claim's procedures
  // (schema.h, kSendCommitted, kClaimCommitted and kClaimsCommitted): a user
  // without the CREATE ROUTINE privilege migrates without them.
  Status FindRoutines(MyConn& conn);
  // Whether the schema still has the unique index on sqlq_messages
  // (queue_id, dedup) (schema.h, version 25: a user that may not create
  // the trigger keeps it). Without it, dedup keys are held in
  // sqlq_dedup_keys.
  Status FindDedupIndex(MyConn& conn);
  // Send's message `m`, which has a dedup key, where the keys are held
  // apart (dedup_keys_apart_): the id stored, or the holder's as a
  // duplicate.
  // The keys of `messages` that have one, stored with ids id0, id0 +
  // step, ... into sqlq_dedup_keys in one statement. kAlreadyExists when a
  // key was taken (or is there twice): then the messages are deleted
  // again, and the transaction goes on.
  Status StoreKeys(MyConn& conn, std::int64_t queue_id,
                   std::span<const Message> messages, std::int64_t id0,
                   std::int64_t step);
  Result<SendResult> SendKeyed(MyConn& conn, std::int64_t queue_id,
                               const Message& m, std::int64_t ready_us,
                               std::int64_t now, bool grouped);
  // After a CALL of one of them failed: true when it was missing or the
  // user may not run it (then `routine` is cleared and the caller goes
  // the general way from now on), with the failed transaction rolled back.
  bool RoutineGone(MyConn& c, const Status& failed, std::atomic<bool>& routine);

  const ConnParams params_;
  // Send's keys go in sqlq_dedup_keys (FindDedupIndex).
  bool dedup_keys_apart_ = false;
  // SendAndCommit sends one message with a CALL of kSendCommitted (false
  // when it is missing or the user may not run it).
  std::atomic<bool> send_routine_{false};
  // ClaimAndCommit claims one message after one receipt with a CALL of
  // kClaimCommitted, and more with one of kClaimsCommitted, as
  // SendsAndClaimAndCommit does (each false when it is missing or the user
  // may not run it).
  std::atomic<bool> claim_routine_{false};
  std::atomic<bool> claims_routine_{false};
  // The WakeBumps this store committed (Poller subtracts them).
  std::atomic<std::int64_t> own_bumps_{0};
  std::function<std::size_t()> waiting_;
  std::unique_ptr<Poller> poller_;
};

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_IMPL_H_
