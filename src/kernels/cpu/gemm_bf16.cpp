#include "kernels/cpu/gemm_bf16.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "core/check.h"

namespace tessera::kernels {

const char* bf16_gemm_path_name(Bf16GemmPath path) {
  return path == Bf16GemmPath::OneDnn ? "onednn-bf16" : "widen-to-f32";
}

bool cpu_has_bf16_dot_products() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Bf16GemmPath detect_bf16_gemm_path() {
  return cpu_has_bf16_dot_products() ? Bf16GemmPath::OneDnn : Bf16GemmPath::WidenToF32;
}

// oneDNN's engine and stream, and one matmul primitive per call shape. A transposed operand is the
// same memory read with swapped strides, so no call copies its inputs.
struct Bf16Gemm::OneDnn {
  using Key = std::tuple<int, int, int, int, int, int, bool, bool, bool>;  // M N K lda ldb ldc ta tb accumulate

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, std::pair<dnnl::matmul, dnnl::matmul::primitive_desc>> primitives;
  std::string last_implementation;

  std::pair<dnnl::matmul, dnnl::matmul::primitive_desc>& primitive(const Key& key) {
    auto found = primitives.find(key);
    if (found != primitives.end()) return found->second;
    const auto [M, N, K, lda, ldb, ldc, ta, tb, accumulate] = key;
    using dims = dnnl::memory::dims;
    using dt = dnnl::memory::data_type;
    const dnnl::memory::desc a_md({M, K}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
    const dnnl::memory::desc b_md({K, N}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c_md({M, N}, dt::f32, dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    return primitives.emplace(key, std::make_pair(dnnl::matmul(pd), pd)).first->second;
  }
};

Bf16Gemm::Bf16Gemm(Bf16GemmPath path) : path_(path) {
  if (path_ == Bf16GemmPath::OneDnn) onednn_ = std::make_unique<OneDnn>();
}

Bf16Gemm::~Bf16Gemm() = default;

std::string Bf16Gemm::describe() const {
  if (!onednn_ || onednn_->last_implementation.empty()) return bf16_gemm_path_name(path_);
  return fmt::format("{} ({})", bf16_gemm_path_name(path_), onednn_->last_implementation);
}

namespace {
// dst [rows, cols] contiguous from src's rows `ld` apart.
void widen(std::vector<float>& dst, const bf16* src, int rows, int cols, int ld) {
  dst.resize(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (int r = 0; r < rows; ++r) {
    convert_bf16_to_f32(dst.data() + static_cast<size_t>(r) * cols, src + static_cast<size_t>(r) * ld,
                        static_cast<size_t>(cols));
  }
}
}  // namespace

void Bf16Gemm::multiply(Transpose ta, Transpose tb, int M, int N, int K, const bf16* a, int lda, const bf16* b, int ldb,
                        float* c, int ldc, bool accumulate) {
  const bool a_t = ta == Transpose::Yes, b_t = tb == Transpose::Yes;
  TS_CHECK(M >= 0 && N >= 0 && K >= 0, "bf16 gemm: negative shape M={} N={} K={}", M, N, K);
  TS_CHECK(lda >= std::max(1, a_t ? M : K) && ldb >= std::max(1, b_t ? K : N) && ldc >= std::max(1, N),
           "bf16 gemm: leading dimensions lda={} ldb={} ldc={} are shorter than the rows of op(a) [{}x{}], op(b) "
           "[{}x{}] or c [{}x{}]",
           lda, ldb, ldc, M, K, K, N, M, N);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) {
      for (int i = 0; i < M; ++i) std::fill(c + static_cast<size_t>(i) * ldc, c + static_cast<size_t>(i) * ldc + N, 0.f);
    }
    return;
  }
  if (path_ == Bf16GemmPath::WidenToF32) {
    widen(wide_a_, a, a_t ? K : M, a_t ? M : K, lda);
    widen(wide_b_, b, b_t ? N : K, b_t ? K : N, ldb);
    gemm<float>(ta, tb, M, N, K, 1.0f, wide_a_.data(), a_t ? M : K, wide_b_.data(), b_t ? K : N,
                accumulate ? 1.0f : 0.0f, c, ldc);
    return;
  }
  auto& [primitive, pd] = onednn_->primitive({M, N, K, lda, ldb, ldc, a_t, b_t, accumulate});
  onednn_->last_implementation = pd.impl_info_str();
  // oneDNN's memory objects take non-const handles; the inputs are only read.
  dnnl::memory a_mem(pd.src_desc(), onednn_->engine, const_cast<bf16*>(a));
  dnnl::memory b_mem(pd.weights_desc(), onednn_->engine, const_cast<bf16*>(b));
  dnnl::memory c_mem(pd.dst_desc(), onednn_->engine, c);
  primitive.execute(onednn_->stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
  onednn_->stream.wait();
}

}  // namespace tessera::kernels
