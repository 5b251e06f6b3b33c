#pragma once
// Independent references for the optimizers PyTorch 1.13 does not ship, transcribed from the
// papers in double precision with plain loops over one whole tensor at a time: no segments, no
// sharding, no shared code with src/optim. The tests hold tessera's float optimizers against them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace tessera::testing {

struct RefTensor {
  std::string name;
  int64_t rows = 1, cols = 1;  // a matrix (rows > 1 or declared 2-D), or a vector of `cols`
  bool matrix = false;         // two or more dimensions: decayed and adapted
  std::vector<double> w;       // the weights, row-major
  int64_t numel() const { return static_cast<int64_t>(w.size()); }
};

struct RefHyper {
  double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double momentum = 0.9, trust = 0.001;                      // LARS
  double unadapted_lr_scale = 1.0;                           // LAMB, LARS: the rate of biases and gains
  double decay_rate = 0.8, clip = 1.0;                       // Adafactor
  bool first_moment = false, relative_step = false;          // Adafactor
  int64_t block = 2048;                                      // 8-bit Adam
  bool linear = false;                                       // 8-bit Adam's codes
  int64_t variance_freeze = 0;                               // AdamW: v stays after this step
};

inline double norm_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// LAMB, You et al. 2020, Algorithm 2 (φ the identity), biases and gains excluded.
struct RefLamb {
  std::vector<std::vector<double>> m, v;
  int64_t t = 0;
  void step(std::vector<RefTensor>& ts, const std::vector<std::vector<double>>& grads, const RefHyper& h) {
    if (m.empty()) {
      for (const auto& x : ts) m.emplace_back(x.w.size(), 0.0), v.emplace_back(x.w.size(), 0.0);
    }
    ++t;
    for (size_t k = 0; k < ts.size(); ++k) {
      RefTensor& x = ts[k];
      const double wd = x.matrix ? h.weight_decay : 0.0;
      std::vector<double> u(x.w.size());
      for (size_t i = 0; i < u.size(); ++i) {
        const double g = grads[k][i];
        m[k][i] = h.beta1 * m[k][i] + (1 - h.beta1) * g;
        v[k][i] = h.beta2 * v[k][i] + (1 - h.beta2) * g * g;
        const double mhat = m[k][i] / (1 - std::pow(h.beta1, double(t)));
        const double vhat = v[k][i] / (1 - std::pow(h.beta2, double(t)));
        u[i] = mhat / (std::sqrt(vhat) + h.eps) + wd * x.w[i];
      }
      const double wn = norm_of(x.w), un = norm_of(u);
      const double ratio = !x.matrix ? h.unadapted_lr_scale : wn > 0 && un > 0 ? wn / un : 1.0;
      for (size_t i = 0; i < u.size(); ++i) x.w[i] -= h.lr * ratio * u[i];
    }
  }
};

// LARS, You et al. 2017, Algorithm 1 (with ε in the local rate's denominator), exclusions as LAMB.
struct RefLars {
  std::vector<std::vector<double>> b;
  void step(std::vector<RefTensor>& ts, const std::vector<std::vector<double>>& grads, const RefHyper& h) {
    if (b.empty()) {
      for (const auto& x : ts) b.emplace_back(x.w.size(), 0.0);
    }
    for (size_t k = 0; k < ts.size(); ++k) {
      RefTensor& x = ts[k];
      const double wd = x.matrix ? h.weight_decay : 0.0;
      const double wn = norm_of(x.w), gn = norm_of(grads[k]);
      const double local = !x.matrix ? h.unadapted_lr_scale : wn > 0 && gn > 0 ? h.trust * wn / (gn + wd * wn + h.eps) : 1.0;
      for (size_t i = 0; i < x.w.size(); ++i) {
        b[k][i] = h.momentum * b[k][i] + h.lr * local * (grads[k][i] + wd * x.w[i]);
        x.w[i] -= b[k][i];
      }
    }
  }
};

// Adafactor, Shazeer & Stern 2018: Algorithm 4 (factored, matrices) and 5 (vectors), β̂2t = 1 − t^−c,
// update clipping (Section 6), relative step (Section 7) with the schedule's rate as ρ, optional β1.
struct RefAdafactor {
  std::vector<std::vector<double>> r, c, v, m;
  int64_t t = 0;
  void step(std::vector<RefTensor>& ts, const std::vector<std::vector<double>>& grads, const RefHyper& h) {
    const double eps1 = 1e-30, eps2 = 1e-3;
    if (r.empty()) {
      for (const auto& x : ts) {
        r.emplace_back(x.matrix ? x.rows : 0, 0.0);
        c.emplace_back(x.matrix ? x.cols : 0, 0.0);
        v.emplace_back(x.matrix ? 0 : x.w.size(), 0.0);
        m.emplace_back(x.w.size(), 0.0);
      }
    }
    ++t;
    const double beta2 = 1.0 - std::pow(double(t), -h.decay_rate);
    for (size_t k = 0; k < ts.size(); ++k) {
      RefTensor& x = ts[k];
      const std::vector<double>& g = grads[k];
      std::vector<double> u(x.w.size());
      if (x.matrix) {
        std::vector<double> rows(size_t(x.rows), 0.0), cols(size_t(x.cols), 0.0);
        for (int64_t i = 0; i < x.rows; ++i) {
          for (int64_t j = 0; j < x.cols; ++j) {
            const double sq = g[size_t(i * x.cols + j)] * g[size_t(i * x.cols + j)] + eps1;
            rows[size_t(i)] += sq;
            cols[size_t(j)] += sq;
          }
        }
        double total = 0;
        for (int64_t i = 0; i < x.rows; ++i) {
          r[k][size_t(i)] = beta2 * r[k][size_t(i)] + (1 - beta2) * rows[size_t(i)];
          total += r[k][size_t(i)];
        }
        for (int64_t j = 0; j < x.cols; ++j) c[k][size_t(j)] = beta2 * c[k][size_t(j)] + (1 - beta2) * cols[size_t(j)];
        for (int64_t i = 0; i < x.rows; ++i) {
          for (int64_t j = 0; j < x.cols; ++j) {
            const double vhat = r[k][size_t(i)] * c[k][size_t(j)] / total;
            u[size_t(i * x.cols + j)] = g[size_t(i * x.cols + j)] / std::sqrt(vhat);
          }
        }
      } else {
        for (size_t i = 0; i < u.size(); ++i) {
          v[k][i] = beta2 * v[k][i] + (1 - beta2) * (g[i] * g[i] + eps1);
          u[i] = g[i] / std::sqrt(v[k][i]);
        }
      }
      const double rms_u = norm_of(u) / std::sqrt(double(u.size()));
      const double rms_w = norm_of(x.w) / std::sqrt(double(u.size()));
      const double alpha = h.relative_step ? h.lr * std::max(eps2, rms_w) : h.lr;
      const double wd = x.matrix ? h.weight_decay : 0.0;
      for (size_t i = 0; i < u.size(); ++i) {
        double step = u[i] / std::max(1.0, rms_u / h.clip);
        if (h.first_moment) {
          m[k][i] = h.beta1 * m[k][i] + (1 - h.beta1) * step;
          step = m[k][i];
        }
        x.w[i] = x.w[i] - alpha * wd * x.w[i] - alpha * step;
      }
    }
  }
};

// Dettmers et al. 2022's dynamic tree code, from its description: sign bit (signed only), then
// E zero bits for the decade 10^−E, a one bit, and the rest a linear fraction in [0.1, 1) (bin
// midpoints); plus 0 and 1. E runs to 6: for signed codes that is every pattern with a one bit;
// the unsigned code gives up its E = 7 pattern (one value, 5.5e-8) to hold 1. Linear: equal steps.
inline std::vector<double> ref_codebook(bool linear, bool is_signed) {
  std::vector<double> code;
  if (linear) {
    const int levels = is_signed ? 255 : 256;
    for (int k = 0; k < levels; ++k) code.push_back(is_signed ? -1.0 + 2.0 * k / 254.0 : k / 255.0);
  } else {
    const int bits = is_signed ? 7 : 8;  // the bits after the sign
    for (int zeros = 0; zeros <= 6; ++zeros) {
      const int fraction_bits = bits - 1 - zeros;
      for (int f = 0; f < (1 << fraction_bits); ++f) {
        const double value = std::pow(10.0, -zeros) * (0.1 + 0.9 * (f + 0.5) / double(1 << fraction_bits));
        code.push_back(value);
        if (is_signed) code.push_back(-value);
      }
    }
    code.push_back(0.0);
    code.push_back(1.0);
  }
  std::sort(code.begin(), code.end());
  return code;
}

inline int ref_nearest(const std::vector<double>& code, double x) {
  int best = 0;
  for (int i = 1; i < int(code.size()); ++i) {
    if (std::abs(code[size_t(i)] - x) < std::abs(code[size_t(best)] - x)) best = i;
  }
  return best;
}

// 8-bit AdamW: moments stored as codes × the absmax of their block of `block` elements of the
// tensor; dequantized, updated in full precision, used, requantized. Tensors named "embed.*" and
// those under 4096 elements keep full-precision moments (as bitsandbytes does).
struct RefAdam8bit {
  std::vector<std::vector<int>> mq, vq;
  std::vector<std::vector<double>> ma, va, m, v;  // scales per block; full moments for 32-bit tensors
  std::vector<double> scode, ucode;
  int64_t t = 0;
  static bool quantized(const RefTensor& x) { return x.name.rfind("embed.", 0) != 0 && x.numel() >= 4096; }
  void step(std::vector<RefTensor>& ts, const std::vector<std::vector<double>>& grads, const RefHyper& h) {
    if (mq.empty()) {
      scode = ref_codebook(h.linear, true);
      ucode = ref_codebook(h.linear, false);
      for (const auto& x : ts) {
        const size_t blocks = size_t((x.numel() + h.block - 1) / h.block);
        const int zero_s = ref_nearest(scode, 0.0), zero_u = ref_nearest(ucode, 0.0);
        mq.emplace_back(x.w.size(), zero_s), vq.emplace_back(x.w.size(), zero_u);
        ma.emplace_back(blocks, 0.0), va.emplace_back(blocks, 0.0);
        m.emplace_back(x.w.size(), 0.0), v.emplace_back(x.w.size(), 0.0);
      }
    }
    ++t;
    const double bc1 = 1 - std::pow(h.beta1, double(t)), bc2 = 1 - std::pow(h.beta2, double(t));
    for (size_t k = 0; k < ts.size(); ++k) {
      RefTensor& x = ts[k];
      const double wd = x.matrix ? h.weight_decay : 0.0;
      const bool q = quantized(x);
      std::vector<double> nm(x.w.size()), nv(x.w.size());
      for (size_t i = 0; i < x.w.size(); ++i) {
        const size_t b = i / size_t(h.block);
        const double mi = q ? scode[size_t(mq[k][i])] * ma[k][b] : m[k][i];
        const double vi = q ? ucode[size_t(vq[k][i])] * va[k][b] : v[k][i];
        nm[i] = h.beta1 * mi + (1 - h.beta1) * grads[k][i];
        nv[i] = h.beta2 * vi + (1 - h.beta2) * grads[k][i] * grads[k][i];
        x.w[i] = x.w[i] * (1 - h.lr * wd) - h.lr * (nm[i] / bc1) / (std::sqrt(nv[i] / bc2) + h.eps);
      }
      if (!q) {
        m[k] = nm, v[k] = nv;
        continue;
      }
      for (size_t b = 0; b < ma[k].size(); ++b) {
        const size_t lo = b * size_t(h.block), hi = std::min(x.w.size(), lo + size_t(h.block));
        double am = 0, av = 0;
        for (size_t i = lo; i < hi; ++i) am = std::max(am, std::abs(nm[i])), av = std::max(av, nv[i]);
        ma[k][b] = am, va[k][b] = av;
        for (size_t i = lo; i < hi; ++i) {
          mq[k][i] = ref_nearest(scode, am > 0 ? nm[i] / am : 0.0);
          vq[k][i] = ref_nearest(ucode, av > 0 ? nv[i] / av : 0.0);
        }
      }
    }
  }
};

// AdamW (Loshchilov & Hutter) whose second moment stops at step T = variance_freeze and keeps
// T's bias correction from then on, as 1-bit Adam's compressed stage does (Tang et al. 2021,
// Algorithm 1); T = 0 is plain AdamW.
struct RefAdamW {
  std::vector<std::vector<double>> m, v;
  int64_t t = 0;
  void step(std::vector<RefTensor>& ts, const std::vector<std::vector<double>>& grads, const RefHyper& h) {
    if (m.empty()) {
      for (const auto& x : ts) m.emplace_back(x.w.size(), 0.0), v.emplace_back(x.w.size(), 0.0);
    }
    ++t;
    const bool frozen = h.variance_freeze > 0 && t > h.variance_freeze;
    const double bc1 = 1 - std::pow(h.beta1, double(t));
    const double bc2 = 1 - std::pow(h.beta2, double(frozen ? h.variance_freeze : t));
    for (size_t k = 0; k < ts.size(); ++k) {
      RefTensor& x = ts[k];
      const double wd = x.matrix ? h.weight_decay : 0.0;
      for (size_t i = 0; i < x.w.size(); ++i) {
        const double g = grads[k][i];
        m[k][i] = h.beta1 * m[k][i] + (1 - h.beta1) * g;
        if (!frozen) v[k][i] = h.beta2 * v[k][i] + (1 - h.beta2) * g * g;
        x.w[i] = x.w[i] * (1 - h.lr * wd) - h.lr * (m[k][i] / bc1) / (std::sqrt(v[k][i] / bc2) + h.eps);
      }
    }
  }
};

}  // namespace tessera::testing
