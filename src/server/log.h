// The server's log: structured lines on stderr, one write each, so that
// lines from threads never interleave (docs/server.md, "Logs").

#ifndef SQLQ_SERVER_LOG_H_
#define SQLQ_SERVER_LOG_H_

#include <string>
#include <string_view>

namespace sqlq::server {

// One structured log line on stderr: "ts=... level=... event=... k=v ...".
void Log(std::string_view level, std::string_view event,
         std::string_view fields = {});
// A value for a key=value log field: quoted when it holds spaces or quotes.
std::string Quote(std::string_view v);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_LOG_H_
