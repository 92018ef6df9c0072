// The columns that hold structured values as JSON text, in every engine:
// a message's headers (a JSON object of strings, NULL when it has none) and
// its error history (a JSON array of {"attempt", "at", "error"} objects,
// "at" in microseconds, oldest first, NULL before the first failure). The
// engines append to the history in SQL (each with its JSON functions), so
// the format is fixed here and in each engine's kAppendError.

#ifndef SQLQ_CORE_COLUMNS_H_
#define SQLQ_CORE_COLUMNS_H_

#include <string>
#include <string_view>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::core {

// kInvalidArgument with the reason when `headers` breaks a limit of
// sqlq::Headers (queue.h).
Status ValidateHeaders(const Headers& headers);
// The same for a queue's labels (QueueOptions::labels).
Status ValidateLabels(const std::map<std::string, std::string>& labels);
// The column's text: empty (stored as NULL) for no headers.
std::string EncodeHeaders(const Headers& headers);
// Column text back to headers; empty text (NULL) is none. Text that is not
// a JSON object of strings (written by hand) yields what can be read.
Headers DecodeHeaders(std::string_view text);
// The history column back to entries; empty text (NULL) is none.
std::vector<AttemptError> DecodeErrors(std::string_view text);
// Error text as the history keeps it: at most kMaxErrorText bytes, valid
// UTF-8 (an invalid byte becomes U+FFFD), NUL bytes replaced too (JSON
// columns of PostgreSQL refuse them).
std::string CleanErrorText(std::string_view error);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_COLUMNS_H_
