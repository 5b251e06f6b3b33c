// Every collective of the MPI communicator against values computed here by formula, run under
// mpirun at 1, 2 and 4 ranks: equal and uneven counts, in place, every reduce op and dtype, the
// byte counters, sequence numbers (and the cross-rank check that catches desynchronized ranks),
// sub-communicators by split and by Mesh, and asynchronous progress while the caller computes.
//
// A plain main: every failed check prints its rank and what failed; the ranks then agree on the
// count of failures and all exit non-zero when any rank saw one.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "dist/mesh.h"
#include "dist/mpi_runtime.h"
#include "../common/rank_checks.h"

using namespace tessera;
using namespace tessera::dist;
using tessera::config::ParallelLayout;

namespace {

using Checks = tessera::testing::RankChecks;

void test_all_reduce(Communicator& c, Checks& t) {
  const int n = c.size();
  const size_t count = 1001;  // odd: chunks of a ring do not divide evenly
  std::vector<float> want_sum(count), want_max(count), want_min(count), want_avg(count);
  for (size_t i = 0; i < count; ++i) {
    want_sum[i] = static_cast<float>(1000 * n * (n - 1) / 2 + n * static_cast<int>(i));
    want_max[i] = static_cast<float>(1000 * (n - 1) + static_cast<int>(i));
    want_min[i] = static_cast<float>(i);
    want_avg[i] = want_sum[i] / static_cast<float>(n);
  }
  auto mine = [&] {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>(1000 * c.rank() + static_cast<int>(i));
    return v;
  };
  for (auto [op, want] : {std::pair{ReduceOp::Sum, &want_sum}, {ReduceOp::Max, &want_max}, {ReduceOp::Min, &want_min},
                          {ReduceOp::Avg, &want_avg}}) {
    std::vector<float> v = mine();
    c.all_reduce(std::span(v), op)->wait();
    t.expect_eq(v, *want, fmt::format("all_reduce f32 {}", reduce_op_name(op)));
  }
  // A buffer large enough for MPI's large-message algorithms.
  std::vector<float> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((c.rank() + 1) * static_cast<int>(i % 97));
  c.all_reduce(std::span(big), ReduceOp::Sum)->wait();
  bool ok = true;
  for (size_t i = 0; i < big.size() && ok; ++i) ok = big[i] == static_cast<float>(n * (n + 1) / 2 * static_cast<int>(i % 97));
  t.expect(ok, "all_reduce f32 sum of 1M elements");

  std::vector<int32_t> ints{c.rank(), -c.rank(), 7};
  c.all_reduce(std::span(ints), ReduceOp::Sum)->wait();
  t.expect_eq(ints, {n * (n - 1) / 2, -n * (n - 1) / 2, 7 * n}, "all_reduce i32 sum");
  std::vector<uint8_t> bytes{static_cast<uint8_t>(10 + c.rank()), static_cast<uint8_t>(200 - c.rank())};
  c.all_reduce(std::span(bytes), ReduceOp::Max)->wait();
  t.expect_eq(bytes, {static_cast<uint8_t>(10 + n - 1), uint8_t{200}}, "all_reduce u8 max");

  // 16-bit floats: small integers and halves are exact, so the sums are too.
  std::vector<bf16> b{to_bf16(0.5f * static_cast<float>(c.rank())), to_bf16(-1.0f)};
  c.all_reduce(std::span(b), ReduceOp::Sum)->wait();
  t.expect(to_float(b[0]) == 0.25f * static_cast<float>(n * (n - 1)) && to_float(b[1]) == -static_cast<float>(n),
           fmt::format("all_reduce bf16 sum: got {} {}", to_float(b[0]), to_float(b[1])));
  std::vector<f16> h{to_f16(static_cast<float>(c.rank() + 1)), to_f16(2.0f)};
  c.all_reduce(std::span(h), ReduceOp::Avg)->wait();
  t.expect(to_float(h[0]) == 0.5f * static_cast<float>(n + 1) && to_float(h[1]) == 2.0f,
           fmt::format("all_reduce f16 avg: got {} {}", to_float(h[0]), to_float(h[1])));
  std::vector<bf16> bm{to_bf16(static_cast<float>(-c.rank()))};
  c.all_reduce(std::span(bm), ReduceOp::Min)->wait();
  t.expect(to_float(bm[0]) == -static_cast<float>(n - 1), "all_reduce bf16 min");

  // The same data as a tensor.
  std::vector<float> tv(6, static_cast<float>(c.rank()));
  c.all_reduce(Tensor::from_external(tv.data(), {2, 3}, DType::F32), ReduceOp::Sum)->wait();
  t.expect_eq(tv, std::vector<float>(6, static_cast<float>(n * (n - 1) / 2)), "all_reduce of a tensor");

  t.expect_error([&] { c.all_reduce(std::span(ints), ReduceOp::Avg); }, "avg needs a floating dtype", "avg on i32");
}

// Uneven chunks, one of them empty: counts[r] = r + 1 except rank 0 holds none (ZeRO shards of a
// size not divisible by the group).
std::vector<size_t> uneven_counts(int n) {
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) counts[static_cast<size_t>(r)] = r == 0 && n > 1 ? 0 : static_cast<size_t>(r + 2);
  return counts;
}

void test_reduce_scatter(Communicator& c, Checks& t) {
  const int n = c.size();
  const auto r = static_cast<size_t>(c.rank());
  for (const std::vector<size_t>& counts : {std::vector<size_t>(static_cast<size_t>(n), 3), uneven_counts(n)}) {
    const std::vector<size_t> off = chunk_offsets(counts);
    const size_t total = off.back();
    auto input = [&] {
      std::vector<float> v(total);
      for (size_t j = 0; j < total; ++j) v[j] = static_cast<float>(100 * c.rank() + static_cast<int>(j));
      return v;
    };
    std::vector<float> want(counts[r]);
    for (size_t k = 0; k < counts[r]; ++k) want[k] = static_cast<float>(100 * n * (n - 1) / 2 + n * static_cast<int>(off[r] + k));
    const std::string kind = counts == uneven_counts(n) ? "uneven" : "equal";

    std::vector<float> in = input(), out(counts[r], -1.0f);
    c.reduce_scatter(in.data(), out.data(), counts, DType::F32, ReduceOp::Sum)->wait();
    t.expect_eq(out, want, "reduce_scatter sum " + kind);

    std::vector<float> inplace = input();
    c.reduce_scatter(inplace.data(), inplace.data() + off[r], counts, DType::F32, ReduceOp::Avg)->wait();
    std::vector<float> want_avg = want;
    for (float& x : want_avg) x /= static_cast<float>(n);
    t.expect_eq(std::vector<float>(inplace.begin() + static_cast<long>(off[r]), inplace.begin() + static_cast<long>(off[r] + counts[r])),
                want_avg, "reduce_scatter avg in place " + kind);
  }
  std::vector<float> buf(8);
  if (n > 1) {
    t.expect_error([&] { c.reduce_scatter(buf.data(), buf.data() + 1, 2, DType::F32, ReduceOp::Sum); }, "overlaps",
                   "reduce_scatter with overlapping buffers");
  }
  t.expect_error([&] { c.reduce_scatter(buf.data(), buf.data(), std::vector<size_t>(static_cast<size_t>(n + 1), 1), DType::F32, ReduceOp::Sum); },
                 "chunk counts for a group of", "reduce_scatter with too many counts");
}

void test_all_gather(Communicator& c, Checks& t) {
  const int n = c.size();
  const auto r = static_cast<size_t>(c.rank());
  for (const std::vector<size_t>& counts : {std::vector<size_t>(static_cast<size_t>(n), 4), uneven_counts(n)}) {
    const std::vector<size_t> off = chunk_offsets(counts);
    std::vector<int32_t> want(off.back());
    for (size_t q = 0; q < counts.size(); ++q) {
      for (size_t k = 0; k < counts[q]; ++k) want[off[q] + k] = static_cast<int32_t>(1000 * q + k);
    }
    std::vector<int32_t> in(counts[r]);
    for (size_t k = 0; k < counts[r]; ++k) in[k] = static_cast<int32_t>(1000 * r + k);
    const std::string kind = counts == uneven_counts(n) ? "uneven" : "equal";

    std::vector<int32_t> out(off.back(), -1);
    c.all_gather(in.data(), out.data(), counts, DType::I32)->wait();
    t.expect_eq(out, want, "all_gather " + kind);

    std::vector<int32_t> inplace(off.back(), -1);
    std::copy(in.begin(), in.end(), inplace.begin() + static_cast<long>(off[r]));
    c.all_gather(inplace.data() + off[r], inplace.data(), counts, DType::I32)->wait();
    t.expect_eq(inplace, want, "all_gather in place " + kind);
  }
}

void test_broadcast_and_all_to_all(Communicator& c, Checks& t) {
  const int n = c.size();
  const int root = n - 1;
  std::vector<float> b(33, 0.0f);
  if (c.rank() == root) std::iota(b.begin(), b.end(), 1.0f);
  c.broadcast(std::span(b), root)->wait();
  std::vector<float> want_b(33);
  std::iota(want_b.begin(), want_b.end(), 1.0f);
  t.expect_eq(b, want_b, "broadcast from the last rank");

  // all_to_all(v): rank r sends r + j + 1 elements of value 100 r + j to rank j.
  std::vector<size_t> sc(static_cast<size_t>(n)), rc(static_cast<size_t>(n));
  std::vector<int32_t> in, want;
  for (int j = 0; j < n; ++j) {
    sc[static_cast<size_t>(j)] = static_cast<size_t>(c.rank() + j + 1);
    rc[static_cast<size_t>(j)] = static_cast<size_t>(j + c.rank() + 1);
    in.insert(in.end(), sc[static_cast<size_t>(j)], 100 * c.rank() + j);
    want.insert(want.end(), rc[static_cast<size_t>(j)], 100 * j + c.rank());
  }
  std::vector<int32_t> out(want.size(), -1);
  c.all_to_all(in.data(), sc, out.data(), rc, DType::I32)->wait();
  t.expect_eq(out, want, "all_to_all with uneven counts");

  std::vector<uint8_t> eq_in(static_cast<size_t>(2 * n)), eq_out(static_cast<size_t>(2 * n));
  for (int j = 0; j < 2 * n; ++j) eq_in[static_cast<size_t>(j)] = static_cast<uint8_t>(10 * c.rank() + j / 2);
  c.all_to_all(eq_in.data(), eq_out.data(), 2, DType::U8)->wait();
  std::vector<uint8_t> eq_want(static_cast<size_t>(2 * n));
  for (int j = 0; j < 2 * n; ++j) eq_want[static_cast<size_t>(j)] = static_cast<uint8_t>(10 * (j / 2) + c.rank());
  t.expect_eq(eq_out, eq_want, "all_to_all with equal counts");
}

void test_point_to_point(Communicator& c, Checks& t) {
  const int n = c.size();
  const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
  // Everyone posts its send before its receive, with a message far above the eager limit: this
  // deadlocks if sends must finish before receives are posted.
  const size_t count = 1 << 18;
  std::vector<float> out(count), in(count, -1.0f);
  for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(c.rank() * 7 + static_cast<int>(i % 13));
  WorkPtr s = c.send(std::span(out), next, 5);
  WorkPtr r = c.recv(std::span(in), prev, 5);
  std::vector<WorkPtr> both{s, r};
  wait_all(both);
  bool ok = true;
  for (size_t i = 0; i < count && ok; ++i) ok = in[i] == static_cast<float>(prev * 7 + static_cast<int>(i % 13));
  t.expect(ok, "send/recv around the ring");
  t.expect(s->bytes_sent() == count * 4 && r->bytes_sent() == 0, "send counts its bytes, recv none");

  if (n >= 2) {
    // A receive expecting more than was sent is an error, not a silently short buffer.
    std::vector<int32_t> three{1, 2, 3}, four(4);
    if (c.rank() == 0) c.send(std::span<const int32_t>(three), 1, 9)->wait();
    if (c.rank() == 1) {
      t.expect_error([&] { c.recv(std::span(four), 0, 9)->wait(); }, "expected 4 elements from rank 0 and got 3",
                     "recv of a shorter message");
    }
  }
  t.expect_error([&] { c.send(std::span<const int32_t>(std::vector<int32_t>{1}), n, 0); }, "is not a rank",
                 "send to a rank outside the group");
}

// Sends and receives go to MPI on the caller's thread while collectives queue for the progress
// thread: both kinds complete, and one thread's messages with the same tag arrive in the order it
// posted them. Sends of the same tag alternate with all-reduces in flight.
void test_point_to_point_order(Communicator& c, Checks& t) {
  const int n = c.size();
  if (n < 2) return;
  const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
  constexpr int kMessages = 64;
  std::vector<std::vector<float>> reduce(kMessages, std::vector<float>(1 << 14, 1.0f));
  std::vector<int32_t> out(kMessages), in(kMessages, -1);
  std::vector<WorkPtr> works;
  for (int k = 0; k < kMessages; ++k) {
    if (k % 2 == 0) works.push_back(c.all_reduce(std::span(reduce[static_cast<size_t>(k)]), ReduceOp::Sum));
    out[static_cast<size_t>(k)] = 1000 * c.rank() + k;
    works.push_back(c.send(std::span<const int32_t>(&out[static_cast<size_t>(k)], 1), next, 11));
  }
  for (int k = 0; k < kMessages; ++k) works.push_back(c.recv(std::span(&in[static_cast<size_t>(k)], 1), prev, 11));
  wait_all(works);
  bool ordered = true;
  for (int k = 0; k < kMessages; ++k) ordered &= in[static_cast<size_t>(k)] == 1000 * prev + k;
  t.expect(ordered, "same-tag sends arrive in the order they were posted, beside all-reduces");
  bool reduced = true;
  for (int k = 0; k < kMessages; k += 2) {
    const auto& r = reduce[static_cast<size_t>(k)];
    reduced &= r[0] == static_cast<float>(n) && r.back() == static_cast<float>(n);
  }
  t.expect(reduced, "the all-reduces between the sends complete");
}

// Bytes and operation counts follow the ring convention of dist/ops.h, written out here.
void test_counters_and_sequence(Communicator& c, Checks& t) {
  const int n = c.size();
  const uint64_t N = static_cast<uint64_t>(n);
  const CommStats before = c.stats();
  std::vector<float> v(1200, 1.0f);
  WorkPtr a = c.all_reduce(std::span(v), ReduceOp::Sum);
  WorkPtr b = c.all_reduce(std::span(v), ReduceOp::Sum);
  std::vector<float> out(1200 / static_cast<size_t>(n));
  WorkPtr rs = c.reduce_scatter(v.data(), out.data(), 1200 / static_cast<size_t>(n), DType::F32, ReduceOp::Sum);
  WorkPtr bc = c.broadcast(std::span(v), 0);
  WorkPtr bar = c.barrier();
  std::vector<WorkPtr> all{a, b, rs, bc, bar};
  wait_all(all);
  const CommStats after = c.stats();

  // Consecutive numbers on the collective series, agreed across ranks.
  t.expect(b->seq() == a->seq() + 1 && rs->seq() == a->seq() + 2 && bar->seq() == a->seq() + 4,
           fmt::format("sequence numbers {} {} {} {} {}", a->seq(), b->seq(), rs->seq(), bc->seq(), bar->seq()));
  t.expect(after.collectives - before.collectives == 5, "five collectives counted");
  std::vector<int32_t> gathered(static_cast<size_t>(n));
  const int32_t mine = static_cast<int32_t>(bar->seq());
  WorkPtr gather = c.all_gather(&mine, gathered.data(), 1, DType::I32);
  gather->wait();
  t.expect(std::all_of(gathered.begin(), gathered.end(), [&](int32_t s) { return s == mine; }),
           "every rank numbers the barrier alike");

  const uint64_t ar = n > 1 ? 2 * (N - 1) * 1200 * 4 / N : 0;
  const uint64_t rsb = (N - 1) * (1200 / N) * 4;
  const uint64_t bcb = c.rank() == (n - 1) ? 0 : 1200 * 4;
  const uint64_t delta = after.bytes_sent - before.bytes_sent;
  t.expect(delta == 2 * ar + rsb + bcb, fmt::format("bytes sent {} want {}", delta, 2 * ar + rsb + bcb));
  t.expect(a->bytes_sent() == ar && rs->bytes_sent() == rsb && bc->bytes_sent() == bcb && bar->bytes_sent() == 0,
           "bytes of each work");
  t.expect(after.of(OpKind::AllReduce).ops - before.of(OpKind::AllReduce).ops == 2 &&
               after.of(OpKind::AllReduce).bytes_sent - before.of(OpKind::AllReduce).bytes_sent == 2 * ar,
           "per-operation counter of all_reduce");

  // Point-to-point operations have their own series, so they do not shift collective numbers.
  const uint64_t p2p_before = after.point_to_point;
  std::vector<float> x(4, 1.0f), y(4);
  WorkPtr s = c.send(std::span<const float>(x), (c.rank() + 1) % n);
  WorkPtr r = c.recv(std::span(y), (c.rank() + n - 1) % n);
  WorkPtr next = c.barrier();
  std::vector<WorkPtr> p{s, r, next};
  wait_all(p);
  t.expect(next->seq() == gather->seq() + 1, "collective series skips point-to-point operations");
  t.expect(r->seq() == s->seq() + 1 && c.stats().point_to_point == p2p_before + 2, "point-to-point series");
}

void test_async_progress(Communicator& c, Checks& t) {
  // Post a large all-reduce, then compute without calling into the communicator. The progress
  // thread must finish the operation on its own: the loop below watches is_completed(), which
  // never calls MPI. Without progress it would spin to the deadline.
  std::vector<float> grad(1 << 22, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  WorkPtr w = c.all_reduce(std::span(grad), ReduceOp::Sum);
  double acc = 0.0;
  const auto deadline = t0 + std::chrono::seconds(30);
  while (!w->is_completed() && std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 100000; ++i) acc += std::sqrt(static_cast<double>(i) + acc * 1e-9);
  }
  const bool progressed = w->is_completed();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w->wait();
  t.expect(progressed, fmt::format("all_reduce completed while the caller computed (after {:.2f} s, work {})", seconds, acc > 0));
  t.expect(grad[0] == static_cast<float>(c.size()) && grad.back() == static_cast<float>(c.size()), "overlapped all_reduce result");
}

void test_split_and_mesh(Communicator& world, Checks& t) {
  const int n = world.size();
  const int rank = world.rank();
  // By color: even and odd ranks, ordered by descending rank.
  auto half = world.split(rank % 2, -rank, "parity");
  t.expect(half != nullptr, "split by color gives a communicator");
  std::vector<int> members;
  for (int r = n - 1; r >= 0; --r) {
    if (r % 2 == rank % 2) members.push_back(r);
  }
  t.expect(half->group_ranks() == members && half->size() == static_cast<int>(members.size()) &&
               half->rank() == static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()),
           "split by color: members ordered by key");
  std::vector<int32_t> v{rank};
  half->all_reduce(std::span(v), ReduceOp::Sum)->wait();
  t.expect(v[0] == std::accumulate(members.begin(), members.end(), 0), "all_reduce inside the split group");
  // A negative color joins no group.
  auto none = world.split(rank == 0 ? -1 : 0, rank, "rest");
  t.expect((rank == 0) == (none == nullptr), "split with a negative color gives no communicator");

  if (n == 4) {
    // A 2 x 2 layout: tp pairs of adjacent ranks, dp pairs across them.
    Mesh mesh(world, ParallelLayout{.dp = 2, .tp = 2, .pp = 1, .ep = 2});
    t.expect(mesh.tp().group_ranks() == group_of(mesh.layout(), MeshDim::TP, rank), "mesh tp group");
    t.expect(mesh.dp().group_ranks() == group_of(mesh.layout(), MeshDim::DP, rank), "mesh dp group");
    std::vector<int32_t> tpv{rank}, dpv{rank};
    mesh.tp().all_reduce(std::span(tpv), ReduceOp::Sum)->wait();
    mesh.dp().all_reduce(std::span(dpv), ReduceOp::Sum)->wait();
    t.expect(tpv[0] == (rank / 2) * 4 + 1, fmt::format("sum over tp group {}", tpv[0]));
    t.expect(dpv[0] == (rank % 2) * 2 + 2, fmt::format("sum over dp group {}", dpv[0]));
    t.expect(mesh.ep().size() == 2 && mesh.edp().size() == 1 && mesh.pp().size() == 1, "mesh ep, edp and pp sizes");
    t.expect(mesh.coords().tp == rank % 2 && mesh.coords().dp == rank / 2, "mesh coordinates");
  }
  // A layout that does not fit fails on every rank with the same message.
  t.expect_error([&] { Mesh bad(world, ParallelLayout{.dp = n + 1}); }, fmt::format("≠ world size {}", n),
                 "mesh of the wrong size");
  // A mesh of groups made elsewhere keeps them, and refuses one whose size the layout does not have.
  const ParallelLayout data_parallel{.dp = n};
  std::array<std::unique_ptr<Communicator>, kMeshDims.size()> groups, wrong;
  for (MeshDim dim : kMeshDims) {
    groups[static_cast<size_t>(dim)] = world.split_groups(rank_groups(data_parallel, dim), "given");
    wrong[static_cast<size_t>(dim)] = world.split_groups(rank_groups(data_parallel, MeshDim::DP), "all");
  }
  const Communicator* given_dp = groups[static_cast<size_t>(MeshDim::DP)].get();
  const Mesh given(world, data_parallel, std::move(groups));
  t.expect(&given.dp() == given_dp && given.dp().size() == n && given.pp().size() == 1 && given.tp().size() == 1,
           "mesh of given groups");
  if (n > 1) {
    t.expect_error([&] { Mesh bad(world, data_parallel, std::move(wrong)); }, "group given for layout",
                   "mesh of given groups of the wrong size");
  }
}

void test_sequence_check(MpiRuntime& mpi, Checks& t) {
  CommOptions options;
  options.check_sequence = true;
  auto c = mpi.world(options);
  const int n = c->size();
  std::vector<float> v(8, 1.0f);
  c->all_reduce(std::span(v), ReduceOp::Sum)->wait();  // in step
  t.expect(v[0] == static_cast<float>(n), "checked all_reduce");
  if (n < 2) return;
  // Rank 0 reduces while the others broadcast: each rank gets the same error naming both calls,
  // instead of a hang or a wrong result.
  const std::string needle = "rank 0 calls all_reduce #1 (f32, 8 elements, sum); rank 1 calls broadcast #1 (f32, 8 elements, root 0)";
  t.expect_error([&] {
    (c->rank() == 0 ? c->all_reduce(std::span(v), ReduceOp::Sum) : c->broadcast(std::span(v), 0))->wait();
  }, needle, "desynchronized collectives are caught");
  // Arguments that differ are caught too: here the counts.
  t.expect_error([&] {
    c->all_reduce(v.data(), c->rank() == 1 ? 7 : 8, DType::F32, ReduceOp::Sum)->wait();
  }, "out of step", "mismatched counts are caught");
  // After the failed calls, the communicator carries on in step.
  std::fill(v.begin(), v.end(), 1.0f);
  WorkPtr w = c->all_reduce(std::span(v), ReduceOp::Sum);
  w->wait();
  t.expect(v[7] == static_cast<float>(n) && w->seq() == 3, "checked communicator keeps working after a mismatch");
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  Checks t{.rank = mpi.world_rank()};
  try {
    auto world = mpi.world();
    t.expect(world->rank() == mpi.world_rank() && world->size() == mpi.world_size(), "world rank and size");
    std::vector<int> all(static_cast<size_t>(world->size()));
    std::iota(all.begin(), all.end(), 0);
    t.expect(world->group_ranks() == all, "world group ranks");
    test_all_reduce(*world, t);
    test_reduce_scatter(*world, t);
    test_all_gather(*world, t);
    test_broadcast_and_all_to_all(*world, t);
    test_point_to_point(*world, t);
    test_point_to_point_order(*world, t);
    test_counters_and_sequence(*world, t);
    test_async_progress(*world, t);
    test_split_and_mesh(*world, t);
    test_sequence_check(mpi, t);
    std::vector<int32_t> failures{t.failures};
    world->all_reduce(std::span(failures), ReduceOp::Sum)->wait();
    if (mpi.world_rank() == 0) {
      std::printf("mpi_collectives_test: %d checks per rank, %d failures over %d ranks\n", t.passed + t.failures,
                  failures[0], mpi.world_size());
    }
    return failures[0] == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", mpi.world_rank(), e.what());
    mpi.abort_job(1);
  }
}
