#include "kernels/cpu/loops.h"

namespace kiln::kernels::cpu {

std::vector<int64_t> broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const Shape& ts = t.shape();
  const Strides& tst = t.strides();
  KILN_ASSERT(ts.size() <= shape.size(), "operand of rank ", ts.size(), " broadcast to rank ", shape.size());
  std::vector<int64_t> out(shape.size(), 0);
  size_t lead = shape.size() - ts.size();
  int64_t es = static_cast<int64_t>(t.element_size());
  for (size_t d = 0; d < ts.size(); ++d) {
    KILN_ASSERT(ts[d] == shape[lead + d] || ts[d] == 1, "operand shape ", shape_str(ts), " does not broadcast to ",
                shape_str(shape));
    out[lead + d] = ts[d] == 1 ? 0 : tst[d] * es;
  }
  return out;
}

void copy_into(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    visit_dtype(src.dtype(), [&](auto stag) {
      using S = typename decltype(stag)::type;
      if constexpr (std::is_same_v<D, S>) {
        const Tensor ops[2] = {dst, src};
        for_each_run<2>(ops, [&](char** p, const int64_t* s, int64_t n) {
          if (s[0] == sizeof(D) && s[1] == sizeof(S)) {
            std::memcpy(p[0], p[1], static_cast<size_t>(n) * sizeof(D));
          } else {
            for (int64_t i = 0; i < n; ++i)
              *reinterpret_cast<D*>(p[0] + i * s[0]) = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          }
        });
      } else {
        unary_loop<D, S>(dst, src, [](compute_t<S> v) { return convert<D>(v); });
      }
    });
  });
}

}  // namespace kiln::kernels::cpu
