// What ranks tell each other during negotiation: a Request (one rank's view of one named collective)
// and a Response (the agreed collective, or the error, that every rank executes in the same order).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/types.h"

namespace hvdlite {

// The scalars first: a round reads them for every tensor (fusion compatibility), out of cache in a step of many.
struct Request {
  Collective collective = Collective::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root_rank = 0;
  int32_t group_id = 0;           // nonzero: submitted together with others of the same id
  int32_t sender = 0;             // rank within the process set
  bool gpu = false;               // the tensor is in GPU memory: NCCL runs it (gpu/nccl_executor.h)
  double prescale = 1.0;
  double postscale = 1.0;
  int64_t age_ms = 0;             // how long it has waited on the sender (stall reports)
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int32_t> ranks;     // add_process_set: the new set's global ranks

  int64_t NumElements() const;
  int64_t RowElements() const;  // elements in one index of the first dimension (allgather, alltoall, reducescatter)
};

// What every round reads of a response first (its error, its size), then the request's scalars: a cached
// response is one or two cache lines a round, not four (its shape's elements live elsewhere on the heap).
struct Response {
  std::string error;              // non-empty: fail this tensor on every rank with this message
  int64_t elements = -1;          // spec.NumElements() where known (the response cache fills it), else -1
  Request spec;                   // the agreed request (the first rank's, once all agree)
  std::vector<int64_t> first_dims;  // allgather: first dimension of every rank's tensor
  int64_t result = 0;             // join: last rank to join; add_process_set: the new id
  bool shuts_down = false;        // an error after which hvdlite shuts down on every rank (a deadlock, stall_inspector)

  bool ok() const { return error.empty(); }
  int64_t Elements() const { return elements >= 0 ? elements : spec.NumElements(); }
};

// A run of compatible responses executed as one collective (one fusion buffer).
struct FusedBatch {
  std::vector<const Response *> parts;
  std::vector<size_t> members;  // parts' positions in the list PlanFusion was given
  int64_t total_bytes = 0;
};

// Serialisation of request and response lists for the slow path (gather to and broadcast from the
// coordinator). Plain little-endian bytes: all ranks run the same build.
std::vector<uint8_t> EncodeRequests(const std::vector<Request> &requests);
std::vector<Request> DecodeRequests(const uint8_t *data, size_t size);
std::vector<uint8_t> EncodeResponses(const std::vector<Response> &responses);
std::vector<Response> DecodeResponses(const uint8_t *data, size_t size);

}  // namespace hvdlite
