// Power loss under SQLite: a VFS that keeps, for the database and its WAL,
// the contents as of the last fsync, and at a cut point chosen at random
// stops every write (as the machine would) and then makes each sector
// written since the last fsync either reach the disk or not, at random, and
// the file's length either the synced one or the current one (torn
// multi-sector writes, lost appends, files created and never synced gone).
// The database is then opened again and checked:
//   - PRAGMA integrity_check passes and the store opens;
//   - every send that returned success is there, unless an ack of it was
//     tried (a failed ack may have committed); every acked message stays
//     acked;
//   - nothing is there that was never sent, nothing twice;
//   - the queue's counters agree with its messages (sends = in the queue +
//     acked), so nothing half-applied is visible;
//   - the store works on: a send, claim and ack after the cut.
// synchronous=FULL (the default, docs/engines/sqlite.md) must pass every
// cut; synchronous=NORMAL must stay consistent (it may lose the last
// commits, as documented); synchronous=OFF must be seen to lose or corrupt
// at some cut, so that the test is shown able to fail.
//
// SQLQ_POWER_CUTS sets the cuts per mode (default 200 for FULL, a quarter
// of that for the others); SQLQ_POWER_SEED the first seed. The long run is
// PowerLoss.SlowFiveThousandCutsUnderFull: ctest -L slow -R PowerLoss.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "sqlq/store.h"

namespace sqlq {
namespace {

namespace fs = std::filesystem;

// ---- the VFS ---------------------------------------------------------------

constexpr std::size_t kSector = 512;

struct PowerState {
  std::mutex mu;
  sqlite3_vfs* real = nullptr;
  bool armed = false;
  bool frozen = false;   // the power is off: every write fails
  std::int64_t ops = 0;  // writes, truncates and syncs since Arm
  std::int64_t cut_at = 0;
  // The files watched, by path: their contents as of their last fsync, or
  // nullopt when they did not exist then.
  std::map<std::string, std::optional<std::string>> durable;
};

PowerState& State() {
  static PowerState s;
  return s;
}

std::optional<std::string> ReadWhole(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct PlFile {
  sqlite3_file base;
  std::string* path;  // owned; nullptr when the file is not watched
  sqlite3_file* real() { return reinterpret_cast<sqlite3_file*>(this + 1); }
};

PlFile* Pl(sqlite3_file* f) { return reinterpret_cast<PlFile*>(f); }

// Counts a write-like operation; false when it must fail (the power is off,
// or goes off now).
bool Allowed(PowerState& s) {
  if (!s.armed) return true;
  if (s.frozen) return false;
  if (++s.ops >= s.cut_at) {
    s.frozen = true;
    return false;
  }
  return true;
}

int PlClose(sqlite3_file* f) {
  PlFile* p = Pl(f);
  const int rc = p->real()->pMethods->xClose(p->real());
  delete p->path;
  p->path = nullptr;
  return rc;
}
int PlRead(sqlite3_file* f, void* buf, int n, sqlite3_int64 off) {
  return Pl(f)->real()->pMethods->xRead(Pl(f)->real(), buf, n, off);
}
int PlWrite(sqlite3_file* f, const void* buf, int n, sqlite3_int64 off) {
  PowerState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (Pl(f)->path != nullptr && !Allowed(s)) return SQLITE_IOERR_WRITE;
  return Pl(f)->real()->pMethods->xWrite(Pl(f)->real(), buf, n, off);
}
int PlTruncate(sqlite3_file* f, sqlite3_int64 size) {
  PowerState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (Pl(f)->path != nullptr && !Allowed(s)) return SQLITE_IOERR_TRUNCATE;
  return Pl(f)->real()->pMethods->xTruncate(Pl(f)->real(), size);
}
int PlSync(sqlite3_file* f, int flags) {
  PowerState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  PlFile* p = Pl(f);
  if (p->path != nullptr && !Allowed(s)) return SQLITE_IOERR_FSYNC;
  const int rc = p->real()->pMethods->xSync(p->real(), flags);
  // What fsync made durable: the file as it is now (its directory entry
  // too: SQLite syncs the directory of a new journal on its first sync).
  if (rc == SQLITE_OK && p->path != nullptr && s.armed) {
    s.durable[*p->path] = ReadWhole(*p->path);
  }
  return rc;
}
int PlFileSize(sqlite3_file* f, sqlite3_int64* size) {
  return Pl(f)->real()->pMethods->xFileSize(Pl(f)->real(), size);
}
int PlLock(sqlite3_file* f, int l) {
  return Pl(f)->real()->pMethods->xLock(Pl(f)->real(), l);
}
int PlUnlock(sqlite3_file* f, int l) {
  return Pl(f)->real()->pMethods->xUnlock(Pl(f)->real(), l);
}
int PlCheckReserved(sqlite3_file* f, int* out) {
  return Pl(f)->real()->pMethods->xCheckReservedLock(Pl(f)->real(), out);
}
int PlFileControl(sqlite3_file* f, int op, void* arg) {
  return Pl(f)->real()->pMethods->xFileControl(Pl(f)->real(), op, arg);
}
int PlSectorSize(sqlite3_file* f) {
  return Pl(f)->real()->pMethods->xSectorSize(Pl(f)->real());
}
int PlDevice(sqlite3_file* f) {
  return Pl(f)->real()->pMethods->xDeviceCharacteristics(Pl(f)->real());
}
int PlShmMap(sqlite3_file* f, int pg, int sz, int extend, void volatile** pp) {
  return Pl(f)->real()->pMethods->xShmMap(Pl(f)->real(), pg, sz, extend, pp);
}
int PlShmLock(sqlite3_file* f, int off, int n, int flags) {
  return Pl(f)->real()->pMethods->xShmLock(Pl(f)->real(), off, n, flags);
}
void PlShmBarrier(sqlite3_file* f) {
  Pl(f)->real()->pMethods->xShmBarrier(Pl(f)->real());
}
int PlShmUnmap(sqlite3_file* f, int del) {
  return Pl(f)->real()->pMethods->xShmUnmap(Pl(f)->real(), del);
}

// Version 2: shared memory for WAL, no memory-mapped reads (every byte
// SQLite reads comes through xRead, as written through xWrite).
const sqlite3_io_methods kMethods = {
    2,          PlClose,         PlRead,        PlWrite,
    PlTruncate, PlSync,          PlFileSize,    PlLock,
    PlUnlock,   PlCheckReserved, PlFileControl, PlSectorSize,
    PlDevice,   PlShmMap,        PlShmLock,     PlShmBarrier,
    PlShmUnmap, nullptr,         nullptr};

int PlOpen(sqlite3_vfs* vfs, sqlite3_filename name, sqlite3_file* f, int flags,
           int* out_flags) {
  PowerState& s = State();
  PlFile* p = Pl(f);
  p->path = nullptr;
  p->base.pMethods = nullptr;
  const int rc = s.real->xOpen(s.real, name, p->real(), flags, out_flags);
  if (p->real()->pMethods == nullptr) return rc;
  p->base.pMethods = &kMethods;
  (void)vfs;
  constexpr int kWatched =
      SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL | SQLITE_OPEN_MAIN_JOURNAL;
  if (name != nullptr && (flags & kWatched) != 0) {
    p->path = new std::string(name);
  }
  return rc;
}
int PlDelete(sqlite3_vfs*, const char* name, int sync_dir) {
  PowerState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.armed && s.frozen) return SQLITE_IOERR_DELETE;
  const int rc = s.real->xDelete(s.real, name, sync_dir);
  // A delete is taken as durable at once (SQLite syncs the directory for
  // the journals whose deletion matters).
  if (rc == SQLITE_OK && s.armed && s.durable.contains(name)) {
    s.durable[name] = std::nullopt;
  }
  return rc;
}
int PlAccess(sqlite3_vfs*, const char* name, int flags, int* out) {
  return State().real->xAccess(State().real, name, flags, out);
}
int PlFullPathname(sqlite3_vfs*, const char* name, int n, char* out) {
  return State().real->xFullPathname(State().real, name, n, out);
}
int PlRandomness(sqlite3_vfs*, int n, char* out) {
  return State().real->xRandomness(State().real, n, out);
}
int PlSleep(sqlite3_vfs*, int us) {
  return State().real->xSleep(State().real, us);
}
int PlCurrentTime(sqlite3_vfs*, double* out) {
  return State().real->xCurrentTime(State().real, out);
}
int PlGetLastError(sqlite3_vfs*, int n, char* out) {
  return State().real->xGetLastError(State().real, n, out);
}
int PlCurrentTimeInt64(sqlite3_vfs*, sqlite3_int64* out) {
  return State().real->xCurrentTimeInt64(State().real, out);
}

// Installs the VFS as the default one (the store opens its files with the
// default VFS), for the life of the test.
class PowerLossVfs {
 public:
  PowerLossVfs() {
    PowerState& s = State();
    s.real = sqlite3_vfs_find(nullptr);
    vfs_ = {};
    vfs_.iVersion = 2;
    vfs_.szOsFile = static_cast<int>(sizeof(PlFile)) + s.real->szOsFile;
    vfs_.mxPathname = s.real->mxPathname;
    vfs_.zName = "sqlq-power-loss";
    vfs_.xOpen = PlOpen;
    vfs_.xDelete = PlDelete;
    vfs_.xAccess = PlAccess;
    vfs_.xFullPathname = PlFullPathname;
    vfs_.xRandomness = PlRandomness;
    vfs_.xSleep = PlSleep;
    vfs_.xCurrentTime = PlCurrentTime;
    vfs_.xGetLastError = PlGetLastError;
    vfs_.xCurrentTimeInt64 = PlCurrentTimeInt64;
    sqlite3_vfs_register(&vfs_, 1);
  }
  ~PowerLossVfs() {
    sqlite3_vfs_unregister(&vfs_);
    sqlite3_vfs_register(State().real, 1);
  }

  // From now on, count writes and fail them all from the `cut_at`-th on.
  // The database's files are taken as synced as they are now.
  void Arm(const std::string& db, std::int64_t cut_at) {
    PowerState& s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    s.durable.clear();
    for (const char* suffix : {"", "-wal", "-journal"}) {
      s.durable[db + suffix] = ReadWhole(db + suffix);
    }
    s.armed = true;
    s.frozen = false;
    s.ops = 0;
    s.cut_at = cut_at;
  }
  // Writes counted since Arm.
  std::int64_t Disarm() {
    PowerState& s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    s.armed = false;
    return s.ops;
  }
  // The power comes back: each file holds, sector by sector, what was
  // synced or what was written since, at random; its length is the synced
  // one or the current one. Call with every connection closed.
  void Restore(std::mt19937_64& rng) {
    PowerState& s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    std::bernoulli_distribution coin(0.5);
    for (const auto& [path, synced] : s.durable) {
      const std::optional<std::string> now = ReadWhole(path);
      if (!now) {
        // Deleted (durably) or never there: nothing to bring back unless
        // it was synced and the delete came after... deletes are durable.
        continue;
      }
      if (!synced && coin(rng)) {
        // Created and never synced: its directory entry may be lost.
        fs::remove(path);
        continue;
      }
      const std::string old = synced.value_or("");
      const std::size_t length = coin(rng) ? old.size() : now->size();
      std::string out(length, '\0');
      for (std::size_t at = 0; at < length; at += kSector) {
        const std::size_t n = std::min(kSector, length - at);
        const bool take_new = coin(rng);
        const std::string& from = take_new ? *now : old;
        if (at < from.size()) {
          from.copy(out.data() + at, std::min(n, from.size() - at), at);
        }
      }
      std::ofstream(path, std::ios::binary | std::ios::trunc)
          .write(out.data(), static_cast<std::streamsize>(out.size()));
    }
    // Shared memory is not storage: SQLite rebuilds it from the WAL.
    for (const auto& [path, synced] : s.durable) {
      if (path.ends_with("-wal")) {
        fs::remove(path.substr(0, path.size() - 4) + "-shm");
      }
    }
    s.frozen = false;
  }

 private:
  sqlite3_vfs vfs_;
};

// ---- the workload and the check -------------------------------------------

struct Outcome {
  std::set<std::string> attempted;  // payloads of every send tried
  std::set<std::string> sent;       // whose send returned success
  std::set<std::string> acked;      // whose ack returned success
  // Whose ack was tried: one that failed may still have committed (an
  // I/O error during commit is outcome_unknown).
  std::set<std::string> ack_tried;
  // Whose ack returned success before a send that did: a send's commit
  // flushes the WAL, the frames of every commit before it with it.
  std::set<std::string> acked_then_flushed;
};

std::string Dir() {
  const fs::path base =
      fs::is_directory("/dev/shm") ? "/dev/shm" : fs::temp_directory_path();
  std::string tmpl = (base / "sqlq-power-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return "";
  return tmpl;
}

// Sends and acks until the power goes (every call fails) or the work is
// done: single sends, batches of three, claims of two acked one by one.
Outcome Work(WorkQueue& q, int rounds) {
  Outcome o;
  int n = 0;
  auto payload = [&] { return "m-" + std::to_string(n++); };
  int failures = 0;
  std::vector<std::string> acked_since_send;
  auto flushed = [&] {
    o.acked_then_flushed.insert(acked_since_send.begin(),
                                acked_since_send.end());
    acked_since_send.clear();
  };
  for (int r = 0; r < rounds && failures < 3; ++r) {
    if (r % 3 == 1) {
      std::vector<Message> batch;
      for (int i = 0; i < 3; ++i) batch.push_back({.payload = payload()});
      for (const Message& m : batch) o.attempted.insert(m.payload);
      if (q.SendBatch(batch).ok()) {
        for (const Message& m : batch) o.sent.insert(m.payload);
        flushed();
      } else {
        ++failures;
      }
    } else {
      const std::string p = payload();
      o.attempted.insert(p);
      if (q.Send({.payload = p}).ok()) {
        o.sent.insert(p);
        flushed();
      } else {
        ++failures;
      }
    }
    if (r % 2 == 1) {
      auto claimed = q.Claim({.max = 2});
      if (!claimed.ok()) {
        ++failures;
        continue;
      }
      for (const ClaimedMessage& m : *claimed) {
        o.ack_tried.insert(m.payload);
        if (q.Ack(m.receipt).ok()) {
          o.acked.insert(m.payload);
          acked_since_send.push_back(m.payload);
        } else {
          ++failures;
        }
      }
    }
  }
  return o;
}

struct Verdict {
  bool corrupt = false;       // integrity check or open failed
  int lost_sends = 0;         // sent, no ack tried, not there
  int lost_acks = 0;          // acked, there again
  int lost_flushed_acks = 0;  // of those, acked before a send that returned
  int unexpected = 0;         // there, never sent, or twice
  bool counters_off = false;
  std::string detail;
  bool lost() const {
    return corrupt || lost_sends > 0 || lost_acks > 0 || unexpected > 0 ||
           counters_off;
  }
  bool inconsistent() const {
    return corrupt || unexpected > 0 || counters_off;
  }
};

Verdict Check(const std::string& db, const std::string& url, const Outcome& o) {
  Verdict v;
  {
    sqlite3* raw = nullptr;
    std::string result;
    if (sqlite3_open_v2(db.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr) ==
        SQLITE_OK) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(raw, "PRAGMA integrity_check", -1, &st, nullptr) ==
              SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        result = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      } else {
        result = sqlite3_errmsg(raw);
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(raw);
    if (result != "ok") {
      v.corrupt = true;
      v.detail = "integrity_check: " + result;
      return v;
    }
  }
  auto store = Store::Open(url);
  if (!store.ok()) {
    v.corrupt = true;
    v.detail = "open: " + store.status().ToString();
    return v;
  }
  auto q = (*store)->Queue("q");
  if (!q.ok()) {
    v.corrupt = true;
    v.detail = "queue: " + q.status().ToString();
    return v;
  }
  std::map<std::string, int> present;
  std::string cursor;
  do {
    auto page = q->ListMessages({.limit = 1000, .cursor = cursor});
    if (!page.ok()) {
      v.corrupt = true;
      v.detail = "list: " + page.status().ToString();
      return v;
    }
    for (const MessageInfo& m : page->messages) ++present[m.payload];
    cursor = page->next_cursor;
  } while (!cursor.empty());
  for (const std::string& p : o.sent) {
    if (!o.ack_tried.contains(p) && !present.contains(p)) {
      ++v.lost_sends;
      v.detail += " lost: " + p;
    }
  }
  for (const std::string& p : o.acked) {
    if (!present.contains(p)) continue;
    ++v.lost_acks;
    if (o.acked_then_flushed.contains(p)) {
      ++v.lost_flushed_acks;
      v.detail += " ack undone: " + p;
    }
  }
  std::int64_t in_queue = 0;
  for (const auto& [p, count] : present) {
    if (!o.attempted.contains(p) || count != 1) ++v.unexpected;
    in_queue += count;
  }
  auto stats = q->Stats();
  if (!stats.ok()) {
    v.corrupt = true;
    v.detail = "stats: " + stats.status().ToString();
    return v;
  }
  if (stats->sends != in_queue + stats->acks ||
      stats->ready + stats->delayed + stats->leased != in_queue) {
    v.counters_off = true;
    v.detail = "counters: sends " + std::to_string(stats->sends) + ", acks " +
               std::to_string(stats->acks) + ", in the queue " +
               std::to_string(in_queue);
  }
  // And the store goes on working.
  auto sent = q->Send({.payload = "after"});
  auto claimed = q->Claim({.max = 1000});
  bool acked_after = false;
  if (claimed.ok()) {
    for (const ClaimedMessage& m : *claimed) {
      if (m.payload == "after") acked_after = q->Ack(m.receipt).ok();
    }
  }
  if (!sent.ok() || !acked_after) {
    v.corrupt = true;
    v.detail = "after the cut: send " + sent.status().ToString();
  }
  return v;
}

int Cuts(int fallback) {
  const char* e = std::getenv("SQLQ_POWER_CUTS");
  return e != nullptr ? std::max(1, std::atoi(e)) : fallback;
}
std::uint64_t FirstSeed() {
  const char* e = std::getenv("SQLQ_POWER_SEED");
  return e != nullptr ? std::strtoull(e, nullptr, 10) : 1;
}

struct Tally {
  int cuts = 0;
  int lost = 0;          // cuts that lost or broke something
  int inconsistent = 0;  // of those, corrupt, unexpected or counters off
  int sends = 0;         // sends that returned success, over all cuts
  int failed = 0;        // sends tried that failed (the cut came first)
  int lost_acks = 0;     // acks that returned success undone, over all cuts
};

// Runs `cuts` power cuts with the store URL's parameters `params`
// ("synchronous=full"); `on_cut` sees each verdict.
Tally Campaign(
    const std::string& params, int cuts,
    const std::function<void(const Verdict&, std::uint64_t)>& on_cut) {
  constexpr int kRounds = 24;
  PowerLossVfs vfs;
  Tally t;
  std::int64_t span = 0;  // writes of a whole run, measured once
  for (int i = 0; i < cuts; ++i) {
    const std::uint64_t seed = FirstSeed() + static_cast<std::uint64_t>(i);
    std::mt19937_64 rng(seed);
    const std::string dir = Dir();
    const std::string db = dir + "/q.db";
    const std::string url = "sqlite:" + db + "?" + params;
    Outcome o;
    {
      auto store = Store::Open(url);
      if (!store.ok()) {
        ADD_FAILURE() << store.status().ToString();
        return t;
      }
      auto q = (*store)->CreateQueue("q", {});
      if (!q.ok()) {
        ADD_FAILURE() << q.status().ToString();
        return t;
      }
      // The first run measures the writes of the work; every cut falls
      // within them (or just after them all).
      const std::int64_t cut_at =
          span == 0
              ? std::numeric_limits<std::int64_t>::max()
              : std::uniform_int_distribution<std::int64_t>(1, span + 1)(rng);
      vfs.Arm(db, cut_at);
      o = Work(*q, kRounds);
      // The store closes within the same timeline: what it writes at close
      // (a checkpoint) fails too once the power is off, and counts as
      // writes before the cut otherwise.
    }
    const std::int64_t ops = vfs.Disarm();
    if (span == 0) {
      span = ops;
      fs::remove_all(dir);
      --i;
      continue;
    }
    vfs.Restore(rng);
    const Verdict v = Check(db, url, o);
    ++t.cuts;
    t.sends += static_cast<int>(o.sent.size());
    t.failed += static_cast<int>(o.attempted.size() - o.sent.size());
    t.lost_acks += v.lost_acks;
    if (v.lost()) ++t.lost;
    if (v.inconsistent()) ++t.inconsistent;
    on_cut(v, seed);
    fs::remove_all(dir);
  }
  return t;
}

TEST(PowerLoss, SynchronousFullLosesNothingThatReturnedSuccess) {
  const int cuts = Cuts(200);
  const Tally t = Campaign(
      "synchronous=full", cuts, [](const Verdict& v, std::uint64_t seed) {
        EXPECT_FALSE(v.lost())
            << "seed " << seed << " (SQLQ_POWER_SEED=" << seed
            << " SQLQ_POWER_CUTS=1 reruns it): lost sends " << v.lost_sends
            << ", lost acks " << v.lost_acks << ", unexpected " << v.unexpected
            << "; " << v.detail;
      });
  EXPECT_EQ(t.cuts, cuts);
  // The cuts fell within the work: some sends were cut off.
  EXPECT_GT(t.failed, 0);
  std::cout << "synchronous=FULL: " << t.cuts << " cuts, " << t.sends
            << " sends that returned success, " << t.failed << " cut off, "
            << t.lost << " cuts lost something\n";
}

// The long run (label slow): 5,000 cuts under FULL.
TEST(PowerLoss, SlowFiveThousandCutsUnderFull) {
  const Tally t = Campaign(
      "synchronous=full", 5000, [](const Verdict& v, std::uint64_t seed) {
        EXPECT_FALSE(v.lost()) << "seed " << seed << ": " << v.detail;
      });
  EXPECT_EQ(t.cuts, 5000);
  std::cout << "synchronous=FULL: " << t.cuts << " cuts, " << t.sends
            << " sends that returned success, " << t.failed << " cut off, "
            << t.lost << " cuts lost something\n";
}

TEST(PowerLoss, SynchronousNormalMayLoseTheLastCommitsButStaysConsistent) {
  const int cuts = std::max(1, Cuts(200) / 4);
  const Tally t = Campaign(
      "synchronous=normal", cuts, [](const Verdict& v, std::uint64_t seed) {
        EXPECT_FALSE(v.inconsistent()) << "seed " << seed << ": unexpected "
                                       << v.unexpected << "; " << v.detail;
      });
  EXPECT_EQ(t.cuts, cuts);
  std::cout << "synchronous=NORMAL: " << t.cuts << " cuts, " << t.lost
            << " lost acknowledged work, " << t.inconsistent
            << " inconsistent\n";
}

// ack_flush=off (docs/semantics.md, "Acks that do not wait for the disk"):
// an ack's commit skips the fsync, so a cut may undo acks that returned
// success, but only those after the last send that did (whose fsync takes
// every commit before it along); nothing sent is lost, nothing is there
// twice, the counters agree. Some cut must undo an ack, or the setting
// changed nothing (under FULL alone no cut does: the test above).
TEST(PowerLoss, AckFlushOffUndoesOnlyAcksAfterTheLastFlushedCommit) {
  const int cuts = std::max(1, Cuts(200) / 2);
  const Tally t = Campaign(
      "synchronous=full&ack_flush=off", cuts,
      [](const Verdict& v, std::uint64_t seed) {
        EXPECT_FALSE(v.inconsistent() || v.lost_sends > 0 ||
                     v.lost_flushed_acks > 0)
            << "seed " << seed << " (SQLQ_POWER_SEED=" << seed
            << " SQLQ_POWER_CUTS=1 reruns it): lost sends " << v.lost_sends
            << ", acks undone behind a flushed send " << v.lost_flushed_acks
            << ", unexpected " << v.unexpected << "; " << v.detail;
      });
  EXPECT_EQ(t.cuts, cuts);
  EXPECT_GT(t.lost_acks, 0) << "no cut of " << t.cuts
                            << " undid an ack: were they flushed after all?";
  std::cout << "ack_flush=off: " << t.cuts << " cuts, " << t.lost_acks
            << " acks undone, " << t.lost << " cuts lost or undid something\n";
}

// A send cut at each of its writes in turn fails with a code that says
// what the caller may assume: the power going at the commit's fsync (after
// the commit record was written) is outcome_unknown, never a code that
// invites a blind retry after which the message could be there twice; a
// write that failed before the record is unavailable (nothing committed).
TEST(PowerLoss, ASendCutDuringItsCommitIsOutcomeUnknown) {
  PowerLossVfs vfs;
  std::int64_t span = 0;
  std::set<Code> codes;
  for (std::int64_t cut = 0; span == 0 || cut <= span; ++cut) {
    const std::string dir = Dir();
    const std::string db = dir + "/q.db";
    {
      auto store = Store::Open("sqlite:" + db);
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      auto q = (*store)->CreateQueue("q", {});
      ASSERT_TRUE(q.ok()) << q.status().ToString();
      vfs.Arm(db, cut == 0 ? std::numeric_limits<std::int64_t>::max() : cut);
      auto sent = q->Send({.payload = "one"});
      const std::int64_t ops = vfs.Disarm();
      if (cut == 0) {
        ASSERT_TRUE(sent.ok()) << sent.status().ToString();
        span = ops;
      } else if (!sent.ok()) {
        codes.insert(sent.status().code());
        EXPECT_TRUE(sent.status().code() == Code::kOutcomeUnknown ||
                    sent.status().code() == Code::kUnavailable)
            << "cut at write " << cut << ": " << sent.status().ToString();
      }
    }
    fs::remove_all(dir);
  }
  ASSERT_GT(span, 0);
  EXPECT_TRUE(codes.contains(Code::kOutcomeUnknown))
      << "no cut of the " << span << " writes of a send was reported as "
      << "outcome_unknown";
}

// The same cuts without fsync: acknowledged sends are lost (or the file
// broken), so the check above is one that can fail.
TEST(PowerLoss, SynchronousOffLosesAcknowledgedSends) {
  const int cuts = std::max(1, Cuts(200) / 4);
  const Tally t =
      Campaign("synchronous=off", cuts, [](const Verdict&, std::uint64_t) {});
  EXPECT_EQ(t.cuts, cuts);
  EXPECT_GT(t.lost, 0) << "no cut of " << t.cuts
                       << " lost anything without fsync";
  std::cout << "synchronous=OFF: " << t.cuts << " cuts, " << t.lost
            << " lost or broke acknowledged work (" << t.inconsistent
            << " inconsistent)\n";
}

}  // namespace
}  // namespace sqlq
