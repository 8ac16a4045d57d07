#include "collectives/reducescatter_executor.h"

#include "base/mpi_types.h"
#include "base/reduce_kernels.h"
#include "base/collective_info.h"

namespace hvdlite {

std::string ReducescatterExecutor::Run(const ProcessSet &set, const FusedBatch &batch,
                                       const std::vector<Entry *> &locals) {
  const CommContext ctx = ContextOf(set);
  const Request &spec = batch.parts.front()->spec;
  Entry &local = *locals[0];
  const int64_t rows = spec.shape[0], row_elements = spec.RowElements();
  const int64_t total = spec.NumElements();
  const size_t element = DataTypeSize(spec.dtype);
  std::vector<int> counts(ctx.size);
  for (int r = 0; r < ctx.size; ++r) {
    const int64_t my_rows = OutputFirstDim(spec.collective, rows, ctx.size, r);
    if (!FitsInt(my_rows * row_elements)) return "reducescatter of tensor '" + spec.name + "' is too large";
    counts[r] = static_cast<int>(my_rows * row_elements);
  }
  const void *send = local.input;
  if (spec.prescale != 1.0) {
    if (scratch_.size() < total * element) scratch_.resize(total * element);
    ScaleCopy(scratch_.data(), local.input, total, spec.dtype, spec.prescale);
    send = scratch_.data();
  }
  const MpiTypes &types = GlobalMpiTypes();
  MPI_Reduce_scatter(send, local.output, counts.data(), types.Datatype(spec.dtype), types.Op(spec.dtype, spec.op),
                     ctx.comm);
  FinishReduction(local.output, local.output, counts[ctx.rank], spec.dtype, spec.op, spec.postscale, ctx.size);
  return "";
}

}  // namespace hvdlite
