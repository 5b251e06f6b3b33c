// PowerSGD: each matrix of a bucket approximated as P Qᵀ (rank r) by one power iteration on the
// group's summed gradient, with error feedback and Q warm-started from the previous step.
//
// With M_i rank i's gradient plus its error and S = Σ_i M_i:
//   P = Σ_i M_i Q  = S Q            (all-reduce of every matrix's P in one buffer)
//   P̂ = orthonormal columns of P    (Gram-Schmidt, the same on every rank)
//   Q = Σ_i M_iᵀ P̂ = Sᵀ P̂           (all-reduce of every Q in one buffer)
//   S ≈ P̂ Qᵀ = P̂ P̂ᵀ S              (exact when r reaches the matrix's rank)
// and rank i keeps M_i − P̂ Qᵀ / R as its error, so the errors sum to what the group did not send.
// Matrices where r (rows + cols) ≥ rows·cols would not gain, and everything that is not a matrix,
// are summed exactly in one all-reduce.
//
// After the dense warm-up (compression.warmup_steps) the rank ramps down as top-k's ratio does:
// the share of a matrix sent, rank·(rows + cols) / (rows·cols), falls geometrically from 1 to
// its final value over as many steps again, so the error feedback starts from small residuals
// instead of taking in all but four directions of the large early gradients at once. Q is kept at
// the ramp's largest rank; a step at rank k warm-starts from its first k columns.
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/rng.h"
#include "dist/ops.h"
#include "kernels/cpu/low_rank.h"
#include "parallel/compression/methods.h"

namespace tessera::parallel {

namespace {

struct Compressed {
  BucketShape::Matrix m;
  int64_t rank = 0;      // after the ramp
  int64_t max_rank = 0;  // at the ramp's start: the share sent is 1
  Tensor q;              // [cols, max_rank], kept across steps (the warm start)
};

struct BucketPlan {
  std::vector<Compressed> matrices;
  std::vector<std::pair<int64_t, int64_t>> exact;  // [begin, end) runs of the bucket summed exactly
  int64_t exact_elements = 0;
};

// Orthonormal columns, in place: P is [rows, r] row-major. Gram-Schmidt with a second pass for
// each column ("twice is enough"), so columns stay orthogonal when r exceeds the rank of P (the
// ramp's first steps on a low-rank sum): a column left with less than 1e-5 of its norm lies in the
// span of those before it and becomes zero instead of normalized rounding noise.
void orthonormalize(float* p, int64_t rows, int64_t r) {
  for (int64_t c = 0; c < r; ++c) {
    double before = 0;
    for (int64_t i = 0; i < rows; ++i) before += double(p[i * r + c]) * p[i * r + c];
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t prev = 0; prev < c; ++prev) {
        double dot = 0;
        for (int64_t i = 0; i < rows; ++i) dot += double(p[i * r + c]) * p[i * r + prev];
        for (int64_t i = 0; i < rows; ++i) p[i * r + c] -= static_cast<float>(dot) * p[i * r + prev];
      }
    }
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += double(p[i * r + c]) * p[i * r + c];
    const bool independent = norm > 1e-10 * before && norm > 1e-60;
    const float inv = independent ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
    for (int64_t i = 0; i < rows; ++i) p[i * r + c] *= inv;
  }
}

class PowerSgd final : public GradientCompressor {
 public:
  PowerSgd(const CompressionOptions& options, std::vector<BucketShape> buckets, MemoryAccountant& memory)
      : rank_(options.rank), ramp_steps_(options.warmup_steps) {
    TS_CHECK(rank_ >= 1, "compression.rank = {} must be at least 1", rank_);
    for (size_t b = 0; b < buckets.size(); ++b) {
      const BucketShape& shape = buckets[b];
      BucketPlan plan;
      int64_t at = 0;
      std::vector<BucketShape::Matrix> matrices = shape.matrices;
      std::sort(matrices.begin(), matrices.end(), [](const auto& x, const auto& y) { return x.offset < y.offset; });
      for (const BucketShape::Matrix& m : matrices) {
        const int64_t r = std::min<int64_t>({rank_, m.rows, m.cols});
        if (r * (m.rows + m.cols) >= m.rows * m.cols) continue;  // no gain: summed exactly below
        if (m.offset > at) plan.exact.emplace_back(at, m.offset);
        at = m.offset + m.rows * m.cols;
        const int64_t max_rank =
            ramp_steps_ > 0 ? std::max(r, std::min({m.rows, m.cols, m.rows * m.cols / (m.rows + m.cols)})) : r;
        Compressed c{m, r, max_rank, Tensor::empty({m.cols, max_rank}, DType::F32, MemoryTag::Optimizer, memory)};
        // A random start, the same on every rank (then warm-started from each step's Q).
        float* q = c.q.data<float>();
        const uint64_t stream = stream_id("compression:powersgd") ^ (uint64_t{b} << 32) ^ static_cast<uint64_t>(m.offset);
        for (int64_t i = 0; i < m.cols * max_rank; ++i) q[i] = normal(options.seed, stream, static_cast<uint64_t>(i));
        plan.matrices.push_back(std::move(c));
      }
      if (shape.elements > at) plan.exact.emplace_back(at, shape.elements);
      for (const auto& [lo, hi] : plan.exact) plan.exact_elements += hi - lo;
      residuals_.push_back(Tensor::zeros({shape.elements}, DType::F32, MemoryTag::Optimizer, memory));
      plans_.push_back(std::move(plan));
    }
  }

  std::string_view name() const override { return config::compression_name(config::CompressionMethod::PowerSgd); }

  void reduce(int bucket, std::span<float> grad, dist::Communicator& comm) override {
    BucketPlan& plan = plans_.at(static_cast<size_t>(bucket));
    float* error = residuals_.at(static_cast<size_t>(bucket)).data<float>();
    const float R = static_cast<float>(comm.size());
    // Exact part: one all-reduce of the runs between the compressed matrices.
    if (plan.exact_elements > 0) {
      std::vector<float> exact;
      exact.reserve(static_cast<size_t>(plan.exact_elements));
      for (const auto& [lo, hi] : plan.exact) exact.insert(exact.end(), grad.begin() + lo, grad.begin() + hi);
      comm.all_reduce(exact.data(), exact.size(), DType::F32, dist::ReduceOp::Sum)->wait();
      size_t at = 0;
      for (const auto& [lo, hi] : plan.exact) {
        std::copy(exact.begin() + static_cast<std::ptrdiff_t>(at), exact.begin() + static_cast<std::ptrdiff_t>(at + (hi - lo)),
                  grad.begin() + lo);
        at += static_cast<size_t>(hi - lo);
      }
    }
    if (plan.matrices.empty()) return;
    // M = gradient + error, in place in the gradient.
    for (const Compressed& c : plan.matrices) {
      const int64_t n = c.m.rows * c.m.cols;
      for (int64_t i = 0; i < n; ++i) grad[static_cast<size_t>(c.m.offset + i)] += error[c.m.offset + i];
    }
    std::vector<int64_t> ranks;
    int64_t p_elements = 0, q_elements = 0;
    for (const Compressed& c : plan.matrices) {
      ranks.push_back(rank_now(c));
      p_elements += c.m.rows * ranks.back();
      q_elements += c.m.cols * ranks.back();
    }
    std::vector<float> p(static_cast<size_t>(p_elements)), q(static_cast<size_t>(q_elements));
    size_t p_at = 0;
    for (size_t x = 0; x < plan.matrices.size(); ++x) {  // P = M Q (Q's first k columns)
      const Compressed& c = plan.matrices[x];
      const int64_t k_now = ranks[x], ld = c.max_rank;
      const float* M = grad.data() + c.m.offset;
      const float* Q = c.q.data<float>();
      kernels::low_rank_project(M, c.m.rows, c.m.cols, Q, ld, k_now, p.data() + p_at);
      p_at += static_cast<size_t>(c.m.rows * k_now);
    }
    comm.all_reduce(p.data(), p.size(), DType::F32, dist::ReduceOp::Sum)->wait();
    p_at = 0;
    size_t q_at = 0;
    for (size_t x = 0; x < plan.matrices.size(); ++x) {  // P̂, then Q = Mᵀ P̂
      const Compressed& c = plan.matrices[x];
      const int64_t k_now = ranks[x];
      float* P = p.data() + p_at;
      orthonormalize(P, c.m.rows, k_now);
      const float* M = grad.data() + c.m.offset;
      kernels::low_rank_project_transposed(M, c.m.rows, c.m.cols, P, k_now, q.data() + q_at);
      p_at += static_cast<size_t>(c.m.rows * k_now);
      q_at += static_cast<size_t>(c.m.cols * k_now);
    }
    comm.all_reduce(q.data(), q.size(), DType::F32, dist::ReduceOp::Sum)->wait();
    p_at = 0;
    q_at = 0;
    for (size_t x = 0; x < plan.matrices.size(); ++x) {  // S ≈ P̂ Qᵀ; error = M − P̂ Qᵀ / R; Q kept
      Compressed& c = plan.matrices[x];
      const int64_t k_now = ranks[x], ld = c.max_rank;
      const float* P = p.data() + p_at;
      const float* Q = q.data() + q_at;
      kernels::low_rank_reconstruct(grad.data() + c.m.offset, error + c.m.offset, c.m.rows, c.m.cols, P, Q, k_now, R);
      float* kept = c.q.data<float>();
      for (int64_t j = 0; j < c.m.cols; ++j) std::copy(Q + j * k_now, Q + (j + 1) * k_now, kept + j * ld);
      p_at += static_cast<size_t>(c.m.rows * k_now);
      q_at += static_cast<size_t>(c.m.cols * k_now);
    }
  }

  uint64_t wire_bytes(int bucket, int ranks, int /*rank*/) const override {
    const BucketPlan& plan = plans_.at(static_cast<size_t>(bucket));
    uint64_t bytes = 0;
    if (plan.exact_elements > 0) bytes += dist::all_reduce_bytes(static_cast<size_t>(plan.exact_elements), 4, ranks);
    if (!plan.matrices.empty()) {
      int64_t p_elements = 0, q_elements = 0;
      for (const Compressed& c : plan.matrices) {
        p_elements += c.m.rows * rank_now(c);
        q_elements += c.m.cols * rank_now(c);
      }
      bytes += dist::all_reduce_bytes(static_cast<size_t>(p_elements), 4, ranks);
      bytes += dist::all_reduce_bytes(static_cast<size_t>(q_elements), 4, ranks);
    }
    return bytes;
  }

  std::vector<std::pair<std::string, Tensor>> state() override {
    std::vector<std::pair<std::string, Tensor>> out;
    for (size_t b = 0; b < plans_.size(); ++b) {
      out.emplace_back("powersgd.residual." + std::to_string(b), residuals_[b]);
      for (size_t m = 0; m < plans_[b].matrices.size(); ++m) {
        out.emplace_back("powersgd.q." + std::to_string(b) + "." + std::to_string(m), plans_[b].matrices[m].q);
      }
    }
    return out;
  }

 private:
  // This step's rank of a matrix: the share sent, k (rows + cols) / (rows·cols), is
  // share^(s / ramp) in the s-th compressed step of the ramp, from 1 down to the final rank's.
  int64_t rank_now(const Compressed& c) const {
    const int64_t compressed = step() - ramp_steps_;
    if (ramp_steps_ <= 0 || compressed >= ramp_steps_ || c.max_rank == c.rank) return c.rank;
    const double elements = static_cast<double>(c.m.rows * c.m.cols), per_rank = static_cast<double>(c.m.rows + c.m.cols);
    const double final_share = static_cast<double>(c.rank) * per_rank / elements;
    const double share =
        std::pow(final_share, static_cast<double>(std::max<int64_t>(compressed, 1)) / static_cast<double>(ramp_steps_));
    return std::clamp(static_cast<int64_t>(share * elements / per_rank), c.rank, c.max_rank);
  }

  int rank_;
  int64_t ramp_steps_;  // the dense warm-up's length: the ramp takes as many steps
  std::vector<BucketPlan> plans_;
  std::vector<Tensor> residuals_;  // [bucket]: [elements], the error of the compressed matrices
};

}  // namespace

std::unique_ptr<GradientCompressor> make_power_sgd(const CompressionOptions& options, std::vector<BucketShape> buckets,
                                                   MemoryAccountant& memory) {
  return std::make_unique<PowerSgd>(options, std::move(buckets), memory);
}

}  // namespace tessera::parallel
