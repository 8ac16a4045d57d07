#include "negotiation/request_validation.h"
#include "base/collective_info.h"

#include <sstream>

namespace hvdlite {
namespace {

// "rank 0 sent X, rank 1 sent Y" over every rank that has a request.
template <typename Describe>
std::string PerRank(const std::vector<const Request *> &requests, Describe describe) {
  std::ostringstream out;
  bool first = true;
  for (size_t r = 0; r < requests.size(); ++r) {
    if (!requests[r]) continue;
    out << (first ? "" : ", ") << "rank " << r << " sent " << describe(*requests[r]);
    first = false;
  }
  return out.str();
}

template <typename Key, typename Describe>
std::string Disagreement(const std::vector<const Request *> &requests, const Request &first,
                         const char *what, Key key, Describe describe) {
  for (const Request *r : requests) {
    if (r && !(key(*r) == key(first))) {
      std::ostringstream out;
      out << "Mismatched " << what << " for " << CollectiveName(first.collective) << " of tensor '"
          << first.name << "': " << PerRank(requests, describe) << ".";
      return out.str();
    }
  }
  return "";
}

}  // namespace

std::string CheckLocalRequest(const Request &r, int32_t set_size) {
  // Plain string concatenation: this runs for every request, and an ostringstream costs more than the checks.
  if (r.name.empty()) return "tensor name must not be empty";
  if (TakesOp(r.collective)) {
    if (r.dtype == DataType::kBool) {
      return std::string("Unsupported dtype bool for ") + CollectiveName(r.collective) + " of tensor '" + r.name +
             "' (bool is supported by allgather, broadcast and alltoall)";
    }
    if (r.op == ReduceOp::kAdasum) {
      if (r.collective != Collective::kAllreduce) {
        return "Adasum is an all-reduce op; tensor '" + r.name + "' asked it of " + CollectiveName(r.collective);
      }
      if (!IsFloatingPoint(r.dtype)) {
        return "Adasum reduces floating-point tensors only; tensor '" + r.name + "' has dtype " +
               DataTypeName(r.dtype);
      }
      if (set_size & (set_size - 1)) {
        return "Adasum needs a power-of-two number of ranks (as in Horovod); the process set of tensor '" + r.name +
               "' has " + std::to_string(set_size);
      }
    }
    if (static_cast<int32_t>(r.op) < 0 || static_cast<int32_t>(r.op) > HVDLITE_OP_PRODUCT) {
      return "Unknown reduce op " + std::to_string(static_cast<int32_t>(r.op)) + " for tensor '" + r.name + "'";
    }
  }
  if (TakesRoot(r.collective) && (r.root_rank < 0 || r.root_rank >= set_size)) {
    return "Invalid root rank " + std::to_string(r.root_rank) + " for " + CollectiveName(r.collective) + " of tensor '" + r.name +
           "': the process set has " + std::to_string(set_size) + " ranks";
  }
  const hvdlite_collective_info *info = DescribeCollective(r.collective);
  if (info && static_cast<int32_t>(r.shape.size()) < info->min_ndim) {
    return std::string(CollectiveName(r.collective)) + " of tensor '" + r.name +
           "' takes tensors of at least " + std::to_string(info->min_ndim) + " dimension, got " +
           std::to_string(r.shape.size()) + " (reshape a scalar to [1])";
  }
  for (int64_t d : r.shape) {
    if (d < 0) return "Negative dimension in shape of tensor '" + r.name + "'";
  }
  return "";
}

Response AgreeOnResponse(const std::vector<const Request *> &requests) {
  const Request *first = nullptr;
  for (const Request *r : requests) {
    if (r) { first = r; break; }
  }
  Response response;
  response.spec = *first;
  std::string &error = response.error;
  auto check = [&](const char *what, auto key, auto describe) {
    if (error.empty()) error = Disagreement(requests, *first, what, key, describe);
  };
  check("collective operations", [](const Request &r) { return r.collective; },
        [](const Request &r) { return std::string(CollectiveName(r.collective)); });
  check("data types", [](const Request &r) { return r.dtype; },
        [](const Request &r) { return std::string(DataTypeName(r.dtype)); });
  check("devices (a tensor is on the GPU on every rank or on none)", [](const Request &r) { return r.gpu; },
        [](const Request &r) { return std::string(r.gpu ? "a GPU tensor" : "a CPU tensor"); });
  if (!error.empty()) return response;

  Collective c = first->collective;
  if (TakesOp(c)) {
    check("reduce ops", [](const Request &r) { return r.op; },
          [](const Request &r) { return std::string(ReduceOpName(r.op)); });
    check("prescale factors", [](const Request &r) { return r.prescale; },
          [](const Request &r) { return std::to_string(r.prescale); });
    check("postscale factors", [](const Request &r) { return r.postscale; },
          [](const Request &r) { return std::to_string(r.postscale); });
  }
  if (TakesRoot(c)) {
    check("root ranks", [](const Request &r) { return r.root_rank; },
          [](const Request &r) { return std::to_string(r.root_rank); });
  }
  if (c == Collective::kAddProcessSet || c == Collective::kAddProcessSetOfMembers) {
    check("process set ranks", [](const Request &r) { return r.ranks; },
          [](const Request &r) { return ListString(r.ranks); });
  }
  if (GathersRows(c)) {
    // Any first dimension; the rest must agree.
    check("shapes (all but the first dimension)",
          [](const Request &r) { return std::vector<int64_t>(r.shape.begin() + (r.shape.empty() ? 0 : 1), r.shape.end()); },
          [](const Request &r) { return ListString(r.shape); });
    if (c == Collective::kAllgather && error.empty()) {
      for (const Request *r : requests) response.first_dims.push_back(r && !r->shape.empty() ? r->shape[0] : 0);
    }
  } else if (HasTensor(c)) {
    check("shapes", [](const Request &r) { return r.shape; }, [](const Request &r) { return ListString(r.shape); });
  }
  return response;
}

}  // namespace hvdlite
