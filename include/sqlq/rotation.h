// Rotation: a round-robin pool of items served in turn forever — mail
// relays, feeds to poll, API keys to rotate. Items are never consumed.
// Semantics: docs/rings-and-rotations.md.
//
// Thread-safety: a Rotation is a cheap, copyable handle; all methods may be
// called concurrently. A handle must not outlive the Store it came from.

#ifndef SQLQ_ROTATION_H_
#define SQLQ_ROTATION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/status.h"

namespace sqlq {

namespace core {
class RotationImpl;
}

struct RotationOptions {
  // Failures (fail() without ok() between them) after which an item is
  // parked: skipped by next() until reset(). Range 1..1,000,000.
  int max_failures = 3;
  // Largest item payload, in bytes. Range 1..64 MiB.
  std::size_t max_payload_bytes = 1 << 20;
};

// What a rotation is: its name and settings (Store::ListRotations).
struct RotationInfo {
  std::string name;
  RotationOptions options;
};

struct RotationItem {
  std::string key;
  std::string payload;
  std::int64_t served = 0;  // times next() handed it out
  int failures = 0;
  bool parked = false;
};

struct RotationStats {
  std::string name;
  int max_failures = 0;
  std::int64_t items = 0;
  std::int64_t parked = 0;
  std::int64_t serves = 0;  // items handed out by next(), since creation
};

class Rotation {
 public:
  Rotation(const Rotation&) = default;
  Rotation& operator=(const Rotation&) = default;
  ~Rotation();

  const std::string& name() const;

  // Adds an item (key: 1..255 bytes, any text). It is served before items
  // that were served already, after older never-served ones.
  // Errors: kInvalidArgument, kTooLarge, kAlreadyExists (key present).
  Status Add(std::string_view key, std::string_view payload = {});
  // kNotFound when the key is not in the pool.
  Status Remove(std::string_view key);

  // The n (1..10,000) least recently served eligible (unparked) items, in
  // the order (last served, then order of addition), marked served now.
  // Service is stamped with a counter, never a clock, so order is exact at
  // any rate. An empty or fully parked pool gives an empty vector.
  Result<std::vector<RotationItem>> Next(int n = 1);

  // Counts a failure of the item; at max_failures it is parked. Returns
  // the item as it is now. kNotFound for an unknown key.
  Result<RotationItem> Fail(std::string_view key);
  // The item worked: clears its failures. kFailedPrecondition when it is
  // parked (only reset() brings it back).
  Result<RotationItem> Ok(std::string_view key);
  // Unparks the item and clears its failures.
  Result<RotationItem> Reset(std::string_view key);

  // Every item, in serving order (parked ones included, marked).
  Result<std::vector<RotationItem>> List();
  Result<RotationStats> Stats();

 private:
  friend class Store;
  explicit Rotation(std::shared_ptr<core::RotationImpl> impl);
  std::shared_ptr<core::RotationImpl> impl_;
};

}  // namespace sqlq

#endif  // SQLQ_ROTATION_H_
