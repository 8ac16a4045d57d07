// Log lines on stderr, prefixed with the rank, filtered by HVDLITE_LOG_LEVEL (handed over at init).
#pragma once
#include <string>

namespace hvdlite {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4, kFatal = 5 };

void SetLogLevel(int level);
void SetLogRank(int rank);
bool LogEnabled(LogLevel level);
void Log(LogLevel level, const std::string &message);
// The last line logged at warning level or above (the stall inspector's warnings, for tests).
std::string LastWarning();

}  // namespace hvdlite
