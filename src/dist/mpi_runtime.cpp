#include "dist/mpi_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "core/check.h"
#include "dist/mpi_detail.h"

namespace tessera::dist {

namespace detail {
void fail_mpi(const char* file, int line, const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) std::snprintf(text, sizeof text, "error code %d", code);
  tessera::detail::fail_check(file, line, nullptr, fmt::format("MPI call {} failed: {}", call, text));
}
}  // namespace detail

namespace {

struct SumOp { static float apply(float a, float b) { return a + b; } };
struct MaxOp { static float apply(float a, float b) { return std::max(a, b); } };
struct MinOp { static float apply(float a, float b) { return std::min(a, b); } };

inline void store(bf16& out, float v) { out = to_bf16(v); }
inline void store(f16& out, float v) { out = to_f16(v); }

// MPI user operation over 16-bit floats: each step widens to f32, reduces, and rounds back, as
// NCCL does for bf16 sums.
template <class Half, class Op>
void reduce_half(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const Half*>(in);
  auto* b = static_cast<Half*>(inout);
  for (int i = 0; i < *len; ++i) store(b[i], Op::apply(to_float(a[i]), to_float(b[i])));
}

template <class Half>
std::array<MPI_Op, 3> make_half_ops() {
  std::array<MPI_Op, 3> ops{};
  TS_MPI_CHECK(MPI_Op_create(&reduce_half<Half, SumOp>, 1, &ops[0]));
  TS_MPI_CHECK(MPI_Op_create(&reduce_half<Half, MaxOp>, 1, &ops[1]));
  TS_MPI_CHECK(MPI_Op_create(&reduce_half<Half, MinOp>, 1, &ops[2]));
  return ops;
}

std::string_view thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "unknown";
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::BF16: case DType::F16: return MPI_UINT16_T;  // reduced by the operations above
    case DType::I32: return MPI_INT32_T;
    case DType::I8: return MPI_INT8_T;
    case DType::U8: return MPI_UINT8_T;
  }
  TS_FAIL("no MPI datatype for dtype {}", static_cast<int>(dtype));
}

MPI_Op mpi_reduce_op(const MpiRuntime::Reductions& reductions, DType dtype, ReduceOp op) {
  const bool floating = dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
  TS_CHECK(floating || op != ReduceOp::Avg,
           "reduce op avg needs a floating dtype, got {}: reduce with sum and divide where the rounding is known",
           dtype_name(dtype));
  const int index = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;
  if (dtype == DType::BF16) return reductions.half[0][static_cast<size_t>(index)];
  if (dtype == DType::F16) return reductions.half[1][static_cast<size_t>(index)];
  return index == 1 ? MPI_MAX : index == 2 ? MPI_MIN : MPI_SUM;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) : uncaught_at_start_(std::uncaught_exceptions()) {
  int initialized = 0;
  TS_MPI_CHECK(MPI_Initialized(&initialized));
  TS_CHECK(!initialized, "MPI is already initialized: create one MpiRuntime per process and pass it by reference");
  int provided = MPI_THREAD_SINGLE;
  TS_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    TS_FAIL("this MPI library provides only {}; tessera's progress threads need MPI_THREAD_MULTIPLE "
            "(OpenMPI 4 from Debian's openmpi-bin provides it)",
            thread_level_name(provided));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  TS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  TS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  reductions_ = std::make_unique<Reductions>();
  reductions_->half[0] = make_half_ops<bf16>();
  reductions_->half[1] = make_half_ops<f16>();
}

MpiRuntime::~MpiRuntime() {
  if (std::uncaught_exceptions() > uncaught_at_start_ && size_ > 1) {
    // MPI_Finalize would wait for peers that may be blocked in a collective with this rank.
    std::fprintf(stderr, "tessera: rank %d of %d is leaving on an uncaught error; aborting the job\n", rank_, size_);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (auto& ops : reductions_->half) {
    for (MPI_Op& op : ops) MPI_Op_free(&op);
  }
  MPI_Finalize();
}

std::unique_ptr<Communicator> MpiRuntime::world(const CommOptions& options) const {
  auto watchdog = std::make_shared<Watchdog>(options.timeout_seconds, rank_, size_, [](const std::string&) {
    MPI_Abort(MPI_COMM_WORLD, kWatchdogExitCode);
  });
  auto status = std::make_shared<StatusService>(watchdog);
  watchdog->set_diagnosis([weak = std::weak_ptr<StatusService>(status)](const GroupInfo& group, OpKind kind,
                                                                         uint64_t seq, int peer) {
    const std::shared_ptr<StatusService> service = weak.lock();
    return service ? service->diagnose(group, kind, seq, peer) : std::string();
  });
  MPI_Comm comm = MPI_COMM_NULL;
  TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiCommunicator>(comm, "world", options, std::move(watchdog), *this, std::move(status));
}

void MpiRuntime::abort_job(int code) const {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::abort();  // MPI_Abort does not return; this satisfies [[noreturn]] should it ever
}

}  // namespace tessera::dist
