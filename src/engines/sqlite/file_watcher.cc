#include "engines/sqlite/file_watcher.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <system_error>

namespace sqlq::engines::sqlite {

FileWatcher::~FileWatcher() {
  if (thread_.joinable()) {
    std::uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (inotify_fd_ >= 0) close(inotify_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

bool FileWatcher::Start(const std::string& db_path,
                        std::function<void()> changed,
                        std::chrono::microseconds min_interval) {
  std::filesystem::path p(db_path);
  std::filesystem::path dir = p.parent_path();
  if (dir.empty()) dir = ".";
  base_ = p.filename().string();
  wal_ = base_ + "-wal";
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ < 0) return false;
  if (inotify_add_watch(inotify_fd_, dir.c_str(),
                        IN_MODIFY | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO) <
      0) {
    close(inotify_fd_);
    inotify_fd_ = -1;
    return false;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) return false;
  changed_ = std::move(changed);
  min_interval_ = min_interval;
  try {
    thread_ = std::thread([this] { Loop(); });
  } catch (const std::system_error&) {
    return false;  // no thread: waiting claims fall back to polling
  }
  return true;
}

void FileWatcher::Loop() {
  alignas(inotify_event) char buf[16 * (sizeof(inotify_event) + NAME_MAX + 1)];
  const timespec pause{
      .tv_sec = 0,
      .tv_nsec = static_cast<long>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(min_interval_)
              .count())};
  for (;;) {
    pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    int n = ppoll(fds, 2, nullptr, nullptr);
    if (n < 0 && errno != EINTR) return;
    if (fds[1].revents & POLLIN) return;
    bool relevant = false;
    if (fds[0].revents & POLLIN) {
      ssize_t len;
      while ((len = read(inotify_fd_, buf, sizeof buf)) > 0) {
        for (char* p = buf; p < buf + len;) {
          auto* ev = reinterpret_cast<inotify_event*>(p);
          if (ev->mask & IN_Q_OVERFLOW) {
            relevant = true;  // events were dropped: assume ours among them
          } else if (ev->len > 0) {
            std::string_view name(ev->name);
            if (name == base_ || name == wal_) relevant = true;
          }
          p += sizeof(inotify_event) + ev->len;
        }
      }
    }
    if (!relevant) continue;
    changed_();
    // Leave events unread for a while: the kernel folds repeated identical
    // events into one, so a busy writer costs us one wake-up per interval
    // instead of one per write() (a commit makes several).
    pollfd stop = {stop_fd_, POLLIN, 0};
    if (ppoll(&stop, 1, &pause, nullptr) > 0) return;
  }
}

}  // namespace sqlq::engines::sqlite
