// The MPI backend, calling side: each call checks its arguments on the caller's thread (so a bad
// call throws right there), numbers and counts the operation, and queues a closure that posts the
// non-blocking MPI call on the progress thread (mpi_progress.cpp).
#include <fmt/format.h>

#include <climits>
#include <cstring>

#include "core/check.h"
#include "dist/mpi_detail.h"

namespace tessera::dist {

namespace {

int to_int(size_t n, std::string_view op, const std::string& comm) {
  TS_CHECK(n <= static_cast<size_t>(INT_MAX),
           "{} on '{}': {} elements exceed MPI's count limit of {}; split the buffer into smaller calls", op, comm, n,
           INT_MAX);
  return static_cast<int>(n);
}

std::vector<int> to_ints(std::span<const size_t> counts, std::string_view op, const std::string& comm) {
  std::vector<int> out;
  out.reserve(counts.size());
  for (size_t c : counts) out.push_back(to_int(c, op, comm));
  return out;
}

// Displacements of each chunk; the total must fit MPI's int as well.
std::vector<int> displacements(std::span<const size_t> counts, std::string_view op, const std::string& comm) {
  const std::vector<size_t> offsets = chunk_offsets(counts);
  to_int(offsets.back(), op, comm);
  return std::vector<int>(offsets.begin(), offsets.end() - 1);
}

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

int64_t counts_hash(std::span<const size_t> counts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t c : counts) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

std::array<int64_t, 5> signature(DType dtype, size_t count, int root, ReduceOp op, int64_t layout = 0) {
  return {static_cast<int64_t>(dtype), static_cast<int64_t>(count), root, static_cast<int64_t>(op), layout};
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options,
                                 std::shared_ptr<Watchdog> watchdog, const MpiRuntime& runtime,
                                 std::shared_ptr<StatusService> status)
    : comm_(comm), options_(options), watchdog_(std::move(watchdog)), runtime_(runtime), status_(std::move(status)) {
  TS_CHECK(options.max_poll_interval_us >= 0, "max_poll_interval_us must be >= 0, got {}", options.max_poll_interval_us);
  TS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  TS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // World ranks of the members, for messages.
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  TS_MPI_CHECK(MPI_Comm_group(comm_, &mine));
  TS_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<size_t>(size_));
  for (int i = 0; i < size_; ++i) local[static_cast<size_t>(i)] = i;
  auto info = std::make_shared<GroupInfo>();
  info->name = std::move(name);
  info->ranks.resize(static_cast<size_t>(size_));
  TS_MPI_CHECK(MPI_Group_translate_ranks(mine, size_, local.data(), world, info->ranks.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  group_ = std::move(info);
  if (options_.check_sequence) TS_MPI_CHECK(MPI_Comm_dup(comm_, &check_comm_));
  progress_ = std::thread([this] { progress_loop(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  progress_.join();
  if (status_) watchdog_->set_diagnosis(nullptr);  // the service goes with the world
  status_.reset();
  if (check_comm_ != MPI_COMM_NULL) MPI_Comm_free(&check_comm_);
  MPI_Comm_free(&comm_);
}

CommStats MpiCommunicator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

WorkPtr MpiCommunicator::post(OpKind kind, int peer, uint64_t bytes, std::array<int64_t, 5> sig,
                              std::function<void(std::vector<MPI_Request>&)> start, std::function<void()> finish,
                              std::string label) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->label = std::move(label);
  op->peer = peer;
  op->signature = sig;
  op->start = std::move(start);
  op->finish = std::move(finish);
  WorkPtr work;
  bool start_here = false;
  {
    std::lock_guard lock(mutex_);
    op->seq = is_collective(kind) ? next_collective_++ : next_p2p_++;
    op->work = work = std::make_shared<Work>(kind, op->seq, bytes, peer);
    (is_collective(kind) ? stats_.collectives : stats_.point_to_point) += 1;
    stats_.bytes_sent += bytes;
    OpCounter& counter = stats_.by_op[static_cast<size_t>(kind)];
    counter.ops += 1;
    counter.bytes_sent += bytes;
    // A send or receive goes to MPI on the caller's thread (MPI_Isend/MPI_Irecv return at once):
    // handed to the progress thread, it would wait until that thread got a core, and on a machine
    // whose cores all compute that took milliseconds in one send of ten (a woken thread queued
    // behind another process's compute) while the peer stood waiting for the tensor. Their order
    // against queued collectives does not matter: MPI matches point-to-point messages apart from
    // collectives, and one thread's sends still reach MPI in the order it posts them.
    start_here = !is_collective(kind);
    if (!start_here) queue_.push_back(std::move(op));
  }
  if (start_here) {
    if (!begin_op(*op)) return work;  // failed before anything was posted: the work holds the error
    op->started = true;
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(op));
  }
  queue_cv_.notify_one();
  return work;
}

std::function<void()> MpiCommunicator::average(void* data, size_t count, DType dtype) const {
  const auto n = static_cast<float>(size_);
  switch (dtype) {
    case DType::F32:
      return [=] {
        auto* p = static_cast<float*>(data);
        for (size_t i = 0; i < count; ++i) p[i] /= n;
      };
    case DType::BF16:
      return [=] {
        auto* p = static_cast<bf16*>(data);
        for (size_t i = 0; i < count; ++i) p[i] = to_bf16(to_float(p[i]) / n);
      };
    case DType::F16:
      return [=] {
        auto* p = static_cast<f16*>(data);
        for (size_t i = 0; i < count; ++i) p[i] = to_f16(to_float(p[i]) / n);
      };
    default: TS_FAIL("avg needs a floating dtype, got {}", dtype_name(dtype));
  }
}

WorkPtr MpiCommunicator::all_reduce(void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = to_int(count, "all_reduce", name());
  const MPI_Op mop = mpi_reduce_op(runtime_.reductions(), dtype, op);
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  return post(OpKind::AllReduce, -1, all_reduce_bytes(count, dtype_size(dtype), size_), signature(dtype, count, -1, op),
              [=](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, n, type, mop, comm, &r));
                requests.push_back(r);
              },
              op == ReduceOp::Avg ? average(data, count, dtype) : std::function<void()>{});
}

WorkPtr MpiCommunicator::reduce_scatter(const void* input, void* output, std::span<const size_t> counts, DType dtype,
                                        ReduceOp op) {
  TS_CHECK(counts.size() == static_cast<size_t>(size_), "reduce_scatter on '{}': {} chunk counts for a group of {}",
           name(), counts.size(), size_);
  const std::vector<size_t> offsets = chunk_offsets(counts);
  const size_t elem = dtype_size(dtype);
  const size_t mine = counts[static_cast<size_t>(rank_)];
  auto* in = static_cast<char*>(const_cast<void*>(input));  // written only in place, where the caller owns it
  auto* out = static_cast<char*>(output);
  const bool in_place = out == in + offsets[static_cast<size_t>(rank_)] * elem;
  TS_CHECK(in_place || !overlaps(in, offsets.back() * elem, out, mine * elem),
           "reduce_scatter on '{}': output overlaps input; pass disjoint buffers, or this rank's chunk of the input "
           "(offset {} elements) to reduce in place",
           name(), offsets[static_cast<size_t>(rank_)]);
  std::vector<int> recv_counts = to_ints(counts, "reduce_scatter", name());
  displacements(counts, "reduce_scatter", name());
  const MPI_Op mop = mpi_reduce_op(runtime_.reductions(), dtype, op);
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  std::function<void()> avg = op == ReduceOp::Avg ? average(out, mine, dtype) : std::function<void()>{};
  std::function<void()> finish;
  if (in_place || avg) {
    finish = [=] {
      // MPI leaves an in-place result at the start of the buffer; move it to this rank's chunk.
      if (in_place) std::memmove(out, in, mine * elem);
      if (avg) avg();
    };
  }
  return post(OpKind::ReduceScatter, -1, reduce_scatter_bytes(counts, elem, rank_),
              signature(dtype, offsets.back(), -1, op, counts_hash(counts)),
              [=, recv_counts = std::move(recv_counts)](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Ireduce_scatter(in_place ? MPI_IN_PLACE : in, in_place ? in : out,
                                                 recv_counts.data(), type, mop, comm, &r));
                requests.push_back(r);
              },
              std::move(finish));
}

WorkPtr MpiCommunicator::all_gather(const void* input, void* output, std::span<const size_t> counts, DType dtype) {
  TS_CHECK(counts.size() == static_cast<size_t>(size_), "all_gather on '{}': {} chunk counts for a group of {}", name(),
           counts.size(), size_);
  const std::vector<size_t> offsets = chunk_offsets(counts);
  const size_t elem = dtype_size(dtype);
  const size_t mine = counts[static_cast<size_t>(rank_)];
  const auto* in = static_cast<const char*>(input);
  auto* out = static_cast<char*>(output);
  const bool in_place = in == out + offsets[static_cast<size_t>(rank_)] * elem;
  TS_CHECK(in_place || !overlaps(in, mine * elem, out, offsets.back() * elem),
           "all_gather on '{}': input overlaps output; pass disjoint buffers, or this rank's chunk of the output "
           "(offset {} elements) to gather in place",
           name(), offsets[static_cast<size_t>(rank_)]);
  std::vector<int> recv_counts = to_ints(counts, "all_gather", name());
  std::vector<int> displs = displacements(counts, "all_gather", name());
  const int send_count = recv_counts[static_cast<size_t>(rank_)];
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  return post(OpKind::AllGather, -1, all_gather_bytes(counts, elem, rank_),
              signature(dtype, offsets.back(), -1, ReduceOp::Sum, counts_hash(counts)),
              [=, recv_counts = std::move(recv_counts), displs = std::move(displs)](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : in, send_count, type, out, recv_counts.data(),
                                             displs.data(), type, comm, &r));
                requests.push_back(r);
              });
}

WorkPtr MpiCommunicator::broadcast(void* data, size_t count, DType dtype, int root) {
  TS_CHECK(root >= 0 && root < size_, "broadcast on '{}': root {} is not a rank of a group of {}", name(), root, size_);
  const int n = to_int(count, "broadcast", name());
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  return post(OpKind::Broadcast, -1, broadcast_bytes(count, dtype_size(dtype), rank_, size_, root),
              signature(dtype, count, root, ReduceOp::Sum), [=](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Ibcast(data, n, type, root, comm, &r));
                requests.push_back(r);
              });
}

WorkPtr MpiCommunicator::all_to_all(const void* input, std::span<const size_t> send_counts, void* output,
                                    std::span<const size_t> recv_counts, DType dtype) {
  TS_CHECK(send_counts.size() == static_cast<size_t>(size_) && recv_counts.size() == static_cast<size_t>(size_),
           "all_to_all on '{}': {} send and {} receive counts for a group of {}", name(), send_counts.size(),
           recv_counts.size(), size_);
  const size_t elem = dtype_size(dtype);
  const size_t send_total = chunk_offsets(send_counts).back();
  const size_t recv_total = chunk_offsets(recv_counts).back();
  TS_CHECK(!overlaps(input, send_total * elem, output, recv_total * elem),
           "all_to_all on '{}': input and output overlap; pass disjoint buffers", name());
  std::vector<int> sc = to_ints(send_counts, "all_to_all", name());
  std::vector<int> sd = displacements(send_counts, "all_to_all", name());
  std::vector<int> rc = to_ints(recv_counts, "all_to_all", name());
  std::vector<int> rd = displacements(recv_counts, "all_to_all", name());
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  // Counts differ between ranks by design, so only the dtype is compared across the group.
  return post(OpKind::AllToAll, -1, all_to_all_bytes(send_counts, elem, rank_), signature(dtype, 0, -1, ReduceOp::Sum),
              [=, sc = std::move(sc), sd = std::move(sd), rc = std::move(rc),
               rd = std::move(rd)](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Ialltoallv(input, sc.data(), sd.data(), type, output, rc.data(), rd.data(), type, comm,
                                            &r));
                requests.push_back(r);
              });
}

WorkPtr MpiCommunicator::send(const void* data, size_t count, DType dtype, int peer, int tag, std::string label) {
  TS_CHECK(peer >= 0 && peer < size_, "send on '{}': peer {} is not a rank of a group of {}", name(), peer, size_);
  TS_CHECK(tag >= 0 && tag <= 32767, "send on '{}': tag {} outside 0..32767 (MPI's guaranteed range)", name(), tag);
  const int n = to_int(count, "send", name());
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  return post(OpKind::Send, peer, static_cast<uint64_t>(count) * dtype_size(dtype), {},
              [=](std::vector<MPI_Request>& requests) {
                MPI_Request r;
                TS_MPI_CHECK(MPI_Isend(data, n, type, peer, tag, comm, &r));
                requests.push_back(r);
              },
              {}, std::move(label));
}

WorkPtr MpiCommunicator::recv(void* data, size_t count, DType dtype, int peer, int tag, std::string label) {
  TS_CHECK(peer >= 0 && peer < size_, "recv on '{}': peer {} is not a rank of a group of {}", name(), peer, size_);
  TS_CHECK(tag >= 0 && tag <= 32767, "recv on '{}': tag {} outside 0..32767 (MPI's guaranteed range)", name(), tag);
  const int n = to_int(count, "recv", name());
  const MPI_Datatype type = mpi_datatype(dtype);
  const MPI_Comm comm = comm_;
  // The expected count rides in the signature; the progress thread checks the message against it.
  return post(
      OpKind::Recv, peer, 0, signature(dtype, count, -1, ReduceOp::Sum),
      [=](std::vector<MPI_Request>& requests) {
        MPI_Request r;
        TS_MPI_CHECK(MPI_Irecv(data, n, type, peer, tag, comm, &r));
        requests.push_back(r);
      },
      {}, std::move(label));
}

WorkPtr MpiCommunicator::barrier() {
  const MPI_Comm comm = comm_;
  return post(OpKind::Barrier, -1, 0, {}, [=](std::vector<MPI_Request>& requests) {
    MPI_Request r;
    TS_MPI_CHECK(MPI_Ibarrier(comm, &r));
    requests.push_back(r);
  });
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  const MPI_Comm comm = comm_;
  // MPI_Comm_split is blocking: it runs on the progress thread, in order with the other collectives.
  post(OpKind::Split, -1, 0, {}, [=](std::vector<MPI_Request>&) {
    TS_MPI_CHECK(MPI_Comm_split(comm, color < 0 ? MPI_UNDEFINED : color, key, result.get()));
  })->wait();
  if (*result == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiCommunicator>(*result, name, options_, watchdog_, runtime_);
}

}  // namespace tessera::dist
