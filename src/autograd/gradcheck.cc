// gradcheck / gradgradcheck: analytic Jacobians (one backward per output element) against central
// finite differences, in float64, reporting the worst element.
#include <cmath>
#include <sstream>

#include "autograd/meta.h"
#include "kiln/core/generator.h"

namespace kiln::autograd {

namespace {

// Strided offset (in elements, from data_ptr) of flat row-major index `flat` of t.
int64_t offset_of(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t n = t.shape()[static_cast<size_t>(d)];
    off += (flat % n) * t.strides()[static_cast<size_t>(d)];
    flat /= n;
  }
  return off;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

std::string index_str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << "]";
  return os.str();
}

double value_at(const Tensor& t, int64_t flat) {
  return t.data<double>()[offset_of(t, flat)];
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  ensure_registered();
  // f64 leaves: f64 inputs keep their layout (non-contiguous views stay non-contiguous).
  std::vector<Tensor> xs;
  std::vector<size_t> diff;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    if (in.defined() && is_floating(in.dtype())) {
      Tensor x = in.dtype() == DType::f64 ? in.detach() : in.detach().to(DType::f64);
      x.requires_grad_();
      xs.push_back(x);
      diff.push_back(i);
    } else {
      xs.push_back(in);
    }
  }
  KILN_CHECK(!diff.empty(), "gradcheck: no floating inputs to differentiate");
  std::vector<Tensor> outs = f(xs);
  std::vector<size_t> fouts;
  for (size_t j = 0; j < outs.size(); ++j)
    if (outs[j].defined() && is_floating(outs[j].dtype())) fouts.push_back(j);
  KILN_CHECK(!fouts.empty(), "gradcheck: the function has no floating outputs");

  // Analytic: J[o][i] is [out.numel(), in.numel()] stored row-major in a vector.
  std::vector<Tensor> diff_xs;
  for (size_t i : diff) diff_xs.push_back(xs[i]);
  std::vector<std::vector<std::vector<double>>> jac(outs.size());
  for (size_t j : fouts) {
    const Tensor& o = outs[j];
    jac[j].resize(diff.size());
    for (size_t a = 0; a < diff.size(); ++a) jac[j][a].assign(static_cast<size_t>(o.numel() * diff_xs[a].numel()), 0.0);
    if (!o.requires_grad()) continue;  // constant output: analytic Jacobian is zero
    for (int64_t e = 0; e < o.numel(); ++e) {
      Tensor onehot;
      {
        NoGradGuard ng;
        Tensor oh = zeros({o.numel()}, TensorOptions(DType::f64));
        oh.data<double>()[e] = 1.0;
        onehot = oh.reshape(o.shape()).to(o.dtype());
      }
      auto gs = grad({o}, diff_xs, {onehot}, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (size_t a = 0; a < diff.size(); ++a) {
        if (!gs[a].defined()) continue;
        Tensor g = gs[a].to(DType::f64).contiguous();
        const double* gp = g.data<double>();
        for (int64_t k = 0; k < g.numel(); ++k)
          jac[j][a][static_cast<size_t>(e * diff_xs[a].numel() + k)] = gp[k];
      }
    }
  }

  // Numeric: perturb each element of each input (on detached aliases, without recording).
  GradcheckResult res;
  double worst = 0;
  NoGradGuard ng;
  std::vector<Tensor> probe = xs;
  for (size_t a = 0; a < diff.size(); ++a) probe[diff[a]] = xs[diff[a]].detach();
  for (size_t a = 0; a < diff.size(); ++a) {
    Tensor x = probe[diff[a]];
    double* base = x.data<double>();
    for (int64_t k = 0; k < x.numel(); ++k) {
      double* p = base + offset_of(x, k);
      const double orig = *p;
      // Outputs may be views of the probe: copy them before the element is restored.
      auto eval = [&] {
        auto o = f(probe);
        for (auto& t : o)
          if (t.defined() && is_floating(t.dtype())) t = t.to(DType::f64).clone();
        return o;
      };
      *p = orig + opt.eps;
      auto plus = eval();
      *p = orig - opt.eps;
      auto minus = eval();
      *p = orig;
      for (size_t j : fouts) {
        Tensor hi = plus[j].to(DType::f64), lo = minus[j].to(DType::f64);
        for (int64_t e = 0; e < hi.numel(); ++e) {
          const double num = (value_at(hi, e) - value_at(lo, e)) / (2 * opt.eps);
          const double ana = jac[j][a][static_cast<size_t>(e * x.numel() + k)];
          const double err = std::abs(num - ana);
          const double allowed = opt.atol + opt.rtol * std::abs(num);
          const bool bad = !(err <= allowed);
          const double score = std::isnan(err) ? INFINITY : err / allowed;
          if (bad && score >= worst) {
            worst = score;
            res.ok = false;
            std::ostringstream os;
            os << "gradcheck failed: d output " << j << " " << index_str(unravel(e, hi.shape())) << " / d input "
               << diff[a] << " " << index_str(unravel(k, x.shape())) << ": analytic " << ana << ", numeric " << num
               << " (|diff| " << err << " > atol " << opt.atol << " + rtol " << opt.rtol << " * |numeric|)";
            res.message = os.str();
          }
        }
      }
    }
  }
  return res;
}

GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  // v: random f64 cotangents for f's floating outputs.
  std::vector<Tensor> outs;
  {
    std::vector<Tensor> xs;
    for (const Tensor& t : inputs) xs.push_back(t.defined() && is_floating(t.dtype()) ? t.to(DType::f64) : t);
    NoGradGuard ng;
    outs = f(xs);
  }
  std::vector<size_t> fouts;
  std::vector<Tensor> all = inputs;
  Generator gen(1234);
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!outs[j].defined() || !is_floating(outs[j].dtype())) continue;
    fouts.push_back(j);
    all.push_back(randn(outs[j].shape(), TensorOptions(DType::f64), &gen));
  }
  const size_t n_in = inputs.size();
  auto h = [&](const std::vector<Tensor>& args) {
    std::vector<Tensor> xs(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n_in));
    std::vector<Tensor> vs(args.begin() + static_cast<std::ptrdiff_t>(n_in), args.end());
    std::vector<Tensor> ys = f(xs);
    std::vector<Tensor> douts, dvs;
    for (size_t k = 0; k < fouts.size(); ++k)
      if (ys[fouts[k]].requires_grad()) {
        douts.push_back(ys[fouts[k]]);
        dvs.push_back(vs[k]);
      }
    std::vector<Tensor> wrt;
    for (const Tensor& x : xs)
      if (x.defined() && x.requires_grad()) wrt.push_back(x);
    if (!is_grad_enabled() || douts.empty()) {
      // Numeric probe (no recording): recompute the gradient with a local graph.
      EnableGradGuard eg;
      std::vector<Tensor> xs2;
      std::vector<Tensor> wrt2;
      for (const Tensor& x : xs) {
        if (x.defined() && is_floating(x.dtype())) {
          Tensor c = x.detach();
          c.requires_grad_();
          xs2.push_back(c);
          wrt2.push_back(c);
        } else {
          xs2.push_back(x);
        }
      }
      std::vector<Tensor> ys2 = f(xs2);
      std::vector<Tensor> d2, v2;
      for (size_t k = 0; k < fouts.size(); ++k)
        if (ys2[fouts[k]].requires_grad()) {
          d2.push_back(ys2[fouts[k]]);
          v2.push_back(vs[k]);
        }
      std::vector<Tensor> g = d2.empty() ? std::vector<Tensor>(wrt2.size()) : grad(d2, wrt2, v2, false, false, true);
      for (size_t i = 0; i < g.size(); ++i)
        if (!g[i].defined()) g[i] = zeros(wrt2[i].shape(), TensorOptions(DType::f64));
      for (auto& t : g) t = t.detach();
      return g;
    }
    std::vector<Tensor> g = grad(douts, wrt, dvs, true, /*create_graph=*/true, true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros(wrt[i].shape(), TensorOptions(DType::f64));
    return g;
  };
  return gradcheck(h, all, opt);
}

GradcheckResult gradcheck(const SingleTensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  return gradcheck(TensorFn([&f](const std::vector<Tensor>& xs) { return std::vector<Tensor>{f(xs)}; }), inputs, opt);
}

GradcheckResult gradgradcheck(const SingleTensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt) {
  return gradgradcheck(TensorFn([&f](const std::vector<Tensor>& xs) { return std::vector<Tensor>{f(xs)}; }), inputs, opt);
}

}  // namespace kiln::autograd
