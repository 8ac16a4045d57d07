// Log lines on stderr, prefixed with the rank, filtered by HVDLITE_LOG_LEVEL (handed over at init).
#pragma once
#include <string>

#include "hvdlite.h"

namespace hvdlite {

// The C API's levels (hvdlite_config.log_level), under C++'s names.
enum class LogLevel : int {
  kTrace = HVDLITE_LOG_TRACE,
  kDebug = HVDLITE_LOG_DEBUG,
  kInfo = HVDLITE_LOG_INFO,
  kWarning = HVDLITE_LOG_WARNING,
  kError = HVDLITE_LOG_ERROR,
  kFatal = HVDLITE_LOG_FATAL
};

void SetLogLevel(int level);
void SetLogRank(int rank);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string &message);
// The last line logged at warning level or above (the stall inspector's warnings, for tests).
std::string LastWarning();

}  // namespace hvdlite
