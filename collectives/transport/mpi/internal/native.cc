#include "collectives/transport/mpi/internal/native.h"

#include <climits>
#include <cstring>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "core/mutex.h"
#include "core/status_macros.h"

namespace loom {
namespace mpi_internal {
namespace {

absl::StatusOr<MPI_Datatype> MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI8: return MPI_INT8_T;
    case DType::kU8: return MPI_UINT8_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "native (MPI): no MPI type for ", DTypeName(dtype),
      " (the communicator widens f16 and bf16 to f32 before calling)"));
}

absl::StatusOr<MPI_Op> MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kProd: return MPI_PROD;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("native (MPI): no MPI op for ", ReduceOpName(op),
                                                 " (the communicator turns avg into sum)"));
}

absl::StatusOr<int> MpiCount(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "native (MPI): ", count, " elements exceed MPI's int count (", INT_MAX, ")"));
  }
  return static_cast<int>(count);
}

}  // namespace

MpiNative::MpiNative(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

std::string MpiNative::name() const {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string text(version, length);
  if (const size_t cut = text.find(','); cut != std::string::npos) text.resize(cut);
  return absl::StrCat("MPI (", text, ")");
}

absl::Status MpiNative::AllReduce(const void* input, void* output, size_t count, DType dtype,
                                  ReduceOp op) {
  LOOM_ASSIGN_OR_RETURN(const MPI_Datatype type, MpiType(dtype));
  LOOM_ASSIGN_OR_RETURN(const MPI_Op mpi_op, MpiOp(op));
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(count));
  MutexLock lock(&MpiLock());
  const void* send = input == output ? MPI_IN_PLACE : input;
  return MpiStatus(MPI_Allreduce(send, output, n, type, mpi_op, comm_), "MPI_Allreduce");
}

absl::Status MpiNative::ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                                      ReduceOp op) {
  LOOM_ASSIGN_OR_RETURN(const MPI_Datatype type, MpiType(dtype));
  LOOM_ASSIGN_OR_RETURN(const MPI_Op mpi_op, MpiOp(op));
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(count));
  LOOM_RETURN_IF_ERROR(MpiCount(count * size_).status());
  const size_t bytes = count * DTypeSize(dtype);
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  MutexLock lock(&MpiLock());
  if (out == in + rank_ * bytes && bytes > 0) {
    // In place as Loom means it (the output is this rank's block of the input): MPI's
    // MPI_IN_PLACE puts the result at the start instead, so move it afterwards.
    LOOM_MPI_RETURN_IF_ERROR(MPI_Reduce_scatter_block(MPI_IN_PLACE, const_cast<std::byte*>(in), n,
                                                      type, mpi_op, comm_),
                             "MPI_Reduce_scatter_block");
    if (rank_ != 0) std::memmove(out, in, bytes);
    return absl::OkStatus();
  }
  return MpiStatus(MPI_Reduce_scatter_block(input, output, n, type, mpi_op, comm_),
                   "MPI_Reduce_scatter_block");
}

absl::Status MpiNative::AllGather(const void* input, void* output, size_t count, DType dtype) {
  // Moves bytes, so every dtype (f16 and bf16 included) goes as MPI_BYTE.
  const size_t bytes = count * DTypeSize(dtype);
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(bytes));
  LOOM_RETURN_IF_ERROR(MpiCount(bytes * size_).status());
  MutexLock lock(&MpiLock());
  const bool in_place = static_cast<const std::byte*>(output) + rank_ * bytes == input;
  return MpiStatus(MPI_Allgather(in_place ? MPI_IN_PLACE : input, n, MPI_BYTE, output, n, MPI_BYTE,
                                 comm_),
                   "MPI_Allgather");
}

absl::Status MpiNative::Broadcast(const void* input, void* output, size_t count, DType dtype,
                                  int root) {
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(count * DTypeSize(dtype)));
  MutexLock lock(&MpiLock());
  if (rank_ == root && input != output && count > 0) std::memcpy(output, input, count * DTypeSize(dtype));
  return MpiStatus(MPI_Bcast(output, n, MPI_BYTE, root, comm_), "MPI_Bcast");
}

absl::Status MpiNative::Reduce(const void* input, void* output, size_t count, DType dtype,
                               ReduceOp op, int root) {
  LOOM_ASSIGN_OR_RETURN(const MPI_Datatype type, MpiType(dtype));
  LOOM_ASSIGN_OR_RETURN(const MPI_Op mpi_op, MpiOp(op));
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(count));
  MutexLock lock(&MpiLock());
  const void* send = rank_ == root && input == output ? MPI_IN_PLACE : input;
  return MpiStatus(MPI_Reduce(send, output, n, type, mpi_op, root, comm_), "MPI_Reduce");
}

absl::Status MpiNative::AllToAll(const void* input, void* output, size_t count, DType dtype) {
  LOOM_ASSIGN_OR_RETURN(const int n, MpiCount(count * DTypeSize(dtype)));
  LOOM_RETURN_IF_ERROR(MpiCount(count * DTypeSize(dtype) * size_).status());
  MutexLock lock(&MpiLock());
  const void* send = input == output ? MPI_IN_PLACE : input;
  return MpiStatus(MPI_Alltoall(send, n, MPI_BYTE, output, n, MPI_BYTE, comm_), "MPI_Alltoall");
}

absl::Status MpiNative::Barrier() {
  MutexLock lock(&MpiLock());
  return MpiStatus(MPI_Barrier(comm_), "MPI_Barrier");
}

}  // namespace mpi_internal
}  // namespace loom
