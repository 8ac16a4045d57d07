#include "base/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace hvdlite {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarning)};
std::atomic<int> g_rank{-1};
std::mutex g_mutex;
std::string g_last_warning;

const char *LevelName(LogLevel level) {
  static const char *names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
  return names[static_cast<int>(level)];
}

}  // namespace

void SetLogLevel(int level) { g_level = level; }
void SetLogRank(int rank) { g_rank = rank; }
bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level; }

void Log(LogLevel level, const std::string &message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (level >= LogLevel::kWarning) g_last_warning = message;
  if (!LogEnabled(level)) return;
  std::fprintf(stderr, "[hvdlite rank %d] %s: %s\n", g_rank.load(), LevelName(level), message.c_str());
  std::fflush(stderr);
}

std::string LastWarning() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_last_warning;
}

}  // namespace hvdlite
