#include "negotiation/messages.h"

#include <cstring>
#include <stdexcept>

namespace hvdlite {

int64_t Request::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Request::RowElements() const {
  int64_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= shape[d];
  return n;
}

namespace {

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    const auto *p = reinterpret_cast<const uint8_t *>(&value);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void PutString(const std::string &s) {
    Put<int64_t>(static_cast<int64_t>(s.size()));
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  template <typename T>
  void PutVector(const std::vector<T> &v) {
    Put<int64_t>(static_cast<int64_t>(v.size()));
    for (const T &x : v) Put<T>(x);
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class Reader {
 public:
  Reader(const uint8_t *data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T Get() {
    Need(sizeof(T));
    T value;
    std::memcpy(&value, data_ + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    auto n = static_cast<size_t>(Get<int64_t>());
    Need(n);
    std::string s(reinterpret_cast<const char *>(data_ + offset_), n);
    offset_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> GetVector() {
    auto n = static_cast<size_t>(Get<int64_t>());
    std::vector<T> v;
    v.reserve(n);
    for (size_t i = 0; i < n; ++i) v.push_back(Get<T>());
    return v;
  }
  bool AtEnd() const { return offset_ == size_; }

 private:
  void Need(size_t n) const {
    if (offset_ + n > size_) throw std::runtime_error("hvdlite: truncated negotiation message");
  }
  const uint8_t *data_;
  size_t size_;
  size_t offset_ = 0;
};

void PutRequest(Writer &w, const Request &r) {
  w.PutString(r.name);
  w.Put<int32_t>(static_cast<int32_t>(r.collective));
  w.Put<int32_t>(static_cast<int32_t>(r.dtype));
  w.Put<int32_t>(static_cast<int32_t>(r.op));
  w.Put<double>(r.prescale);
  w.Put<double>(r.postscale);
  w.Put<int32_t>(r.root_rank);
  w.Put<int32_t>(r.group_id);
  w.Put<int32_t>(r.sender);
  w.Put<uint8_t>(r.gpu ? 1 : 0);
  w.Put<int64_t>(r.age_ms);
  w.PutVector(r.shape);
  w.PutVector(r.ranks);
}

Request GetRequest(Reader &rd) {
  Request r;
  r.name = rd.GetString();
  r.collective = static_cast<Collective>(rd.Get<int32_t>());
  r.dtype = static_cast<DataType>(rd.Get<int32_t>());
  r.op = static_cast<ReduceOp>(rd.Get<int32_t>());
  r.prescale = rd.Get<double>();
  r.postscale = rd.Get<double>();
  r.root_rank = rd.Get<int32_t>();
  r.group_id = rd.Get<int32_t>();
  r.sender = rd.Get<int32_t>();
  r.gpu = rd.Get<uint8_t>() != 0;
  r.age_ms = rd.Get<int64_t>();
  r.shape = rd.GetVector<int64_t>();
  r.ranks = rd.GetVector<int32_t>();
  return r;
}

}  // namespace

std::vector<uint8_t> EncodeRequests(const std::vector<Request> &requests) {
  Writer w;
  w.Put<int64_t>(static_cast<int64_t>(requests.size()));
  for (const Request &r : requests) PutRequest(w, r);
  return w.Take();
}

std::vector<Request> DecodeRequests(const uint8_t *data, size_t size) {
  Reader rd(data, size);
  std::vector<Request> out(static_cast<size_t>(rd.Get<int64_t>()));
  for (Request &r : out) r = GetRequest(rd);
  return out;
}

std::vector<uint8_t> EncodeResponses(const std::vector<Response> &responses) {
  Writer w;
  w.Put<int64_t>(static_cast<int64_t>(responses.size()));
  for (const Response &r : responses) {
    PutRequest(w, r.spec);
    w.PutVector(r.first_dims);
    w.PutString(r.error);
    w.Put<int64_t>(r.result);
    w.Put<uint8_t>(r.shuts_down ? 1 : 0);
  }
  return w.Take();
}

std::vector<Response> DecodeResponses(const uint8_t *data, size_t size) {
  Reader rd(data, size);
  std::vector<Response> out(static_cast<size_t>(rd.Get<int64_t>()));
  for (Response &r : out) {
    r.spec = GetRequest(rd);
    r.first_dims = rd.GetVector<int64_t>();
    r.error = rd.GetString();
    r.result = rd.Get<int64_t>();
    r.shuts_down = rd.Get<uint8_t>() != 0;
  }
  return out;
}

}  // namespace hvdlite
