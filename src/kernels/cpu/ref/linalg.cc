// Float64 references for matmul and gemm: the textbook triple loop over logical indices.
#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

Tensor matmul(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, "ref::matmul: operands must be at least 1-D");
  Shape as = a.shape(), bs = b.shape();
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  KILN_CHECK(bs[bs.size() - 2] == k, "ref::matmul: inner dimensions differ");
  Shape batch = broadcast_shapes(Shape(as.begin(), as.end() - 2), Shape(bs.begin(), bs.end() - 2), "ref::matmul");
  std::vector<double> av = values(a), bv = values(b), out;
  Shape full = batch;
  full.push_back(m);
  full.push_back(n);
  for_each_index(full, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> ai(idx.begin(), idx.end() - 2), bi = ai;
    ai.push_back(idx[idx.size() - 2]);
    ai.push_back(0);
    bi.push_back(0);
    bi.push_back(idx.back());
    double s = 0;
    for (int64_t p = 0; p < k; ++p) {
      ai.back() = p;
      bi[bi.size() - 2] = p;
      s += av[static_cast<size_t>(broadcast_offset(as, ai))] * bv[static_cast<size_t>(broadcast_offset(bs, bi))];
    }
    out.push_back(s);
  });
  Shape result = batch;
  if (a.dim() > 1) result.push_back(m);
  if (b.dim() > 1) result.push_back(n);
  return from_values(out, result);
}

Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta, bool trans_a, bool trans_b) {
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "ref::gemm: a and b must be 2-D");
  std::vector<double> av = values(a), bv = values(b);
  const int64_t ar = a.shape()[0], ac = a.shape()[1], br = b.shape()[0], bc = b.shape()[1];
  const int64_t m = trans_a ? ac : ar, k = trans_a ? ar : ac, n = trans_b ? br : bc;
  auto at = [&](int64_t i, int64_t p) { return trans_a ? av[static_cast<size_t>(p * ac + i)] : av[static_cast<size_t>(i * ac + p)]; };
  auto bt = [&](int64_t p, int64_t j) { return trans_b ? bv[static_cast<size_t>(j * bc + p)] : bv[static_cast<size_t>(p * bc + j)]; };
  std::vector<double> cv = c.defined() ? values(c) : std::vector<double>{}, out;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += at(i, p) * bt(p, j);
      double r = alpha * s;
      if (c.defined()) r += beta * cv[static_cast<size_t>(broadcast_offset(c.shape(), {i, j}))];
      out.push_back(r);
    }
  }
  return from_values(out, {m, n});
}

}  // namespace kiln::ref
