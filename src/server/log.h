// The server's log: structured lines on stderr, one write each, so that
// lines from threads never interleave (docs/server.md, "Logs"). Lines are
// logfmt ("ts=... level=info event=listening port=8080") or JSON objects
// (--log-format json); lines below --log-level are not written.

#ifndef SQLQ_SERVER_LOG_H_
#define SQLQ_SERVER_LOG_H_

#include <string>
#include <string_view>

#include "sqlq/status.h"

namespace sqlq::server {

enum class LogLevel { kDebug, kInfo, kWarn, kError };
enum class LogFormat { kLogfmt, kJson };

// "debug", "info", "warn" or "error"; kInvalidArgument otherwise.
Result<LogLevel> ParseLogLevel(std::string_view text);
// "logfmt" or "json"; kInvalidArgument otherwise.
Result<LogFormat> ParseLogFormat(std::string_view text);

// Which lines are written and how. Set once at start, before the server's
// threads run; until then every line is written, as logfmt.
void SetLogOptions(LogLevel min_level, LogFormat format);
// Whether a line of `level` would be written: for lines whose fields cost
// something to format (one per request), checked before formatting them.
bool LogEnabled(std::string_view level);

// One structured log line on stderr. `level` is "debug", "info", "warn" or
// "error"; `fields` are logfmt ("k=v k2=\"with spaces\"", values through
// Quote), which a JSON line carries as its members (a number, 42 or 1.25,
// as a JSON number; anything else as a string).
void Log(std::string_view level, std::string_view event,
         std::string_view fields = {});
// A value for a key=value log field: quoted when it holds spaces or quotes.
std::string Quote(std::string_view v);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_LOG_H_
