// Ring: capped per-group queues — "the last 10 viewers of each article".
// A ring has a capacity N and any number of groups; each group keeps its
// newest N entries. Semantics: docs/rings-and-rotations.md.
//
// Thread-safety: a Ring is a cheap, copyable handle; all methods may be
// called concurrently. A handle must not outlive the Store it came from.

#ifndef SQLQ_RING_H_
#define SQLQ_RING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq {

namespace core {
class RingImpl;
}

struct RingOptions {
  // Entries each group keeps (1..1,000,000). Pushing to a full group
  // evicts its oldest entry.
  std::int64_t capacity = 10;
  // Largest payload a push accepts, in bytes. Range 1..64 MiB.
  std::size_t max_payload_bytes = 1 << 20;
};

// What a ring is: its name and settings (Store::ListRings).
struct RingInfo {
  std::string name;
  RingOptions options;
};

struct RingEntry {
  // Per group: 1 for the group's first push, then increasing by one per
  // push, never reused (not even after deletes). 64-bit.
  std::int64_t seq = 0;
  std::string group;
  std::string payload;
  Timestamp pushed_at;
};

struct RingGroup {
  std::string group;
  std::int64_t entries = 0;
};

struct RingStats {
  std::string name;
  std::int64_t capacity = 0;
  std::int64_t groups = 0;   // groups holding at least one entry
  std::int64_t entries = 0;  // over all groups
  std::int64_t pushes = 0;   // since creation
};

struct RingReadOptions {
  bool oldest_first = false;  // newest first by default
  int limit = 100;            // 1..10,000
  // Go on after this entry, in the reading order: newest first, the
  // entries older than seq `after_seq`; oldest first, the newer ones. 0
  // starts at the newest (or oldest) entry. For reading a group in pages.
  std::int64_t after_seq = 0;
};

class Ring {
 public:
  Ring(const Ring&) = default;
  Ring& operator=(const Ring&) = default;
  ~Ring();

  const std::string& name() const;

  // Appends to `group` (1..255 bytes, any text) atomically; when the group
  // then holds more than the capacity, its oldest entry is deleted in the
  // same transaction. Returns the new entry.
  // Errors: kInvalidArgument (group), kTooLarge (payload), kNotFound.
  Result<RingEntry> Push(std::string_view group, std::string_view payload);

  Result<std::vector<RingEntry>> Read(std::string_view group,
                                      const RingReadOptions& options = {});
  // Groups holding entries, by name.
  Result<std::vector<RingGroup>> Groups();
  // Deletes one entry; kNotFound when the group has no entry `seq`.
  Status Delete(std::string_view group, std::int64_t seq);
  // Deletes every entry of the group; returns how many. Its sequence goes
  // on where it was: later pushes never reuse a number.
  Result<std::int64_t> DeleteGroup(std::string_view group);

  // Changes the capacity; groups over the new capacity lose their oldest
  // entries at once. Returns how many entries were evicted.
  Result<std::int64_t> SetCapacity(std::int64_t capacity);

  Result<RingStats> Stats();

 private:
  friend class Store;
  explicit Ring(std::shared_ptr<core::RingImpl> impl);
  std::shared_ptr<core::RingImpl> impl_;
};

}  // namespace sqlq

#endif  // SQLQ_RING_H_
