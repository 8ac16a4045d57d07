// Checks that every rank asked for the same collective on a name, and turns the agreement into a
// Response. Disagreement becomes an error response whose message names the tensor and what each
// rank sent.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "negotiation/messages.h"

namespace hvdlite {

// "[a, b, c]": a shape or a list of ranks, as messages print them.
template <typename T>
std::string ListString(const std::vector<T> &values) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

// Checks one rank's request on its own (before it is queued): dtype, op and argument sanity.
// Returns an empty string when acceptable.
std::string CheckLocalRequest(const Request &request, int32_t set_size);

// requests[r] is rank r's request, or nullptr for a rank that joined (contributes zeros).
Response AgreeOnResponse(const std::vector<const Request *> &requests);

}  // namespace hvdlite
