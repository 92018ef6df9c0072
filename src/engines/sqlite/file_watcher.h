// FileWatcher: notices writes to a database file by other processes, so that
// claims waiting in this process wake within milliseconds without polling.
//
// SQLite offers no cross-process notification. A commit, though, always
// writes the -wal file (or, in rollback modes, the database file), and Linux
// reports such writes through inotify at no cost while nothing happens. We
// watch the directory (the -wal file comes and goes) and call back, at most
// once per `min_interval`, when an event names the database or its WAL.
// docs/semantics.md "Waiting" explains the fallback poll.

#ifndef SQLQ_ENGINES_SQLITE_FILE_WATCHER_H_
#define SQLQ_ENGINES_SQLITE_FILE_WATCHER_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace sqlq::engines::sqlite {

class FileWatcher {
 public:
  FileWatcher() = default;
  FileWatcher(const FileWatcher&) = delete;
  ~FileWatcher();

  // Starts watching `db_path`; returns false (and stays idle) when inotify
  // is unavailable. `changed` runs on the watcher's thread.
  bool Start(const std::string& db_path, std::function<void()> changed,
             std::chrono::microseconds min_interval);

 private:
  void Loop();

  std::function<void()> changed_;
  std::chrono::microseconds min_interval_{0};
  std::string base_, wal_;
  int inotify_fd_ = -1;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_FILE_WATCHER_H_
