// Receipts: the fencing token a claim hands out with each message.
//
// Text form "<id>-<attempt>-<token>", token as 16 lower-case hex digits. The
// id and attempt let core decide a nack's fate without a read; the random
// 64-bit token is what fences: an engine accepts a receipt only while the
// message still carries that token, and every claim draws a new one. So a
// receipt whose lease expired and was claimed again can never ack, nack or
// extend, and receipts cannot be guessed from ids. Format: docs/semantics.md.

#ifndef SQLQ_CORE_RECEIPT_H_
#define SQLQ_CORE_RECEIPT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "sqlq/status.h"

namespace sqlq::core {

struct Receipt {
  std::int64_t id = 0;
  int attempt = 0;
  std::uint64_t token = 0;
};

std::string FormatReceipt(const Receipt& receipt);
// kInvalidArgument when `text` is not a receipt.
Result<Receipt> ParseReceipt(std::string_view text);

// A fresh non-zero token from a per-thread generator seeded by the OS.
std::uint64_t NewLeaseToken();

}  // namespace sqlq::core

#endif  // SQLQ_CORE_RECEIPT_H_
