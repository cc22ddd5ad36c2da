// Tensor metadata, element access, and factories. View and math methods are defined in the ops
// layer (src/ops/tensor_methods.cc) because they go through the dispatcher.
#include "kiln/core/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kiln/core/generator.h"
#include "kiln/core/thread_pool.h"

namespace kiln {

TensorImpl& Tensor::impl() const {
  KILN_CHECK(impl_ != nullptr, "use of an undefined tensor (a default-constructed kiln::Tensor)");
  return *impl_;
}

// A 0-d tensor has no dims to ask about (normalize_axis lets axis 0 / -1 name a 0-d tensor itself).
int64_t Tensor::size(int64_t d) const {
  KILN_CHECK(dim() > 0, "size(", d, "): the tensor is 0-d and has no dims");
  return impl().shape[static_cast<size_t>(normalize_axis(d, dim(), "size"))];
}
int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK(dim() > 0, "stride(", d, "): the tensor is 0-d and has no dims");
  return impl().strides[static_cast<size_t>(normalize_axis(d, dim(), "stride"))];
}

bool Tensor::is_contiguous() const {
  const auto& s = impl().shape;
  const auto& st = impl().strides;
  int64_t expected = 1;
  for (size_t i = s.size(); i-- > 0;) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

uint64_t Tensor::version() const {
  const auto& s = impl().storage;
  return s ? s->version() : 0;
}

void Tensor::check_data_access(DType want, const char* accessor) const {
  const TensorImpl& t = impl();
  if (t.symbolic) KILN_FAIL(t.symbolic->data_access_error(accessor));
  KILN_CHECK(t.device.is_cpu(), accessor, ": tensor is on ", t.device.str(),
             "; copy it to the CPU first with .cpu()");
  KILN_CHECK(want == t.dtype, accessor, ": requested element type ", dtype_name(want),
             " but the tensor's dtype is ", dtype_name(t.dtype));
  KILN_CHECK(t.storage != nullptr, accessor, ": tensor has no storage");
}

void* Tensor::data_ptr() const {
  const TensorImpl& t = impl();
  if (t.symbolic) KILN_FAIL(t.symbolic->data_access_error("data_ptr()"));
  if (!t.storage) return nullptr;
  return static_cast<char*>(t.storage->data()) + t.offset * static_cast<int64_t>(dtype_size(t.dtype));
}

Tensor make_tensor(Storage storage, int64_t offset, Shape shape, Strides strides, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->device = storage ? storage->device() : Device::cpu();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// ---- factories ------------------------------------------------------------------------------------

Tensor empty(const Shape& shape, TensorOptions opt) {
  // Every dim's stride in bytes must be an int64 (the kernels' loops compute them), also when a
  // zero dim leaves no elements: [0, 2^62] is as unrepresentable as [2, 2^62].
  int64_t span = static_cast<int64_t>(dtype_size(opt.dtype));
  for (int64_t d : shape) {
    KILN_CHECK(d >= 0, "empty: negative dimension ", d, " in shape ", shape_str(shape));
    KILN_CHECK(d <= 1 || span <= std::numeric_limits<int64_t>::max() / d, "empty: shape ", shape_str(shape),
               " of ", dtype_name(opt.dtype), " is too large: its strides in bytes overflow int64");
    span *= std::max<int64_t>(d, 1);
  }
  int64_t n = numel_of(shape);
  auto storage = std::make_shared<StorageImpl>(static_cast<size_t>(n) * dtype_size(opt.dtype), opt.device);
  return make_tensor(std::move(storage), 0, shape, contiguous_strides(shape), opt.dtype);
}

namespace {
template <class Fn>
void fill_with(Tensor& t, Fn&& value_at) {  // value_at(i) -> double, for contiguous t
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = t.data<T>();
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = convert<T>(value_at(i));
  });
}
void check_cpu_factory(const TensorOptions& opt, const char* what) {
  KILN_CHECK(opt.device.is_cpu(), what, ": only CPU factories are supported; create on the CPU and "
             "use .to(Device::cuda())");
}
}  // namespace

Tensor full(const Shape& shape, Scalar value, TensorOptions opt) {
  check_cpu_factory(opt, "full");
  Tensor t = empty(shape, opt);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = value.to<T>();
    T* p = t.data<T>();
    int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions opt) {
  check_cpu_factory(opt, "zeros");
  Tensor t = empty(shape, opt);
  if (t.nbytes()) std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}
Tensor ones(const Shape& shape, TensorOptions opt) { return full(shape, 1, opt); }

Tensor arange(Scalar end, TensorOptions opt) { return arange(0, end, 1, opt); }

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opt) {
  check_cpu_factory(opt, "arange");
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, "arange: step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e) && std::isfinite(st), "arange: start, end and step must be finite");
  double count = std::ceil((e - s) / st);
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor t = empty({n}, opt);
  bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  if (integral) {
    int64_t a = start.to_int(), b = step.to_int();
    fill_with(t, [&](int64_t i) { return static_cast<double>(a + b * i); });
  } else {
    fill_with(t, [&](int64_t i) { return s + st * static_cast<double>(i); });
  }
  return t;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opt) {
  check_cpu_factory(opt, "linspace");
  KILN_CHECK(steps >= 0, "linspace: steps must be >= 0, got ", steps);
  Tensor t = empty({steps}, opt);
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  // Like NumPy: the second half is computed from the end so the last value is exactly `end`.
  fill_with(t, [&](int64_t i) {
    return i < steps / 2 ? start + step * static_cast<double>(i)
                         : end - step * static_cast<double>(steps - 1 - i);
  });
  return t;
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions opt) {
  int64_t cols = m.value_or(n);
  KILN_CHECK(n >= 0 && cols >= 0, "eye: sizes must be >= 0, got ", n, " x ", cols);
  Tensor t = zeros({n, cols}, opt);
  fill_with(t, [&](int64_t i) { return (i / std::max<int64_t>(cols, 1)) == (i % std::max<int64_t>(cols, 1)) ? 1.0 : 0.0; });
  return t;
}

Tensor rand(const Shape& shape, TensorOptions opt, Generator* gen) {
  check_cpu_factory(opt, "rand");
  KILN_CHECK(is_floating(opt.dtype), "rand: dtype must be floating, got ", dtype_name(opt.dtype));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opt);
  fill_with(t, [&](int64_t) { return g.uniform(); });
  return t;
}

Tensor randn(const Shape& shape, TensorOptions opt, Generator* gen) {
  check_cpu_factory(opt, "randn");
  KILN_CHECK(is_floating(opt.dtype), "randn: dtype must be floating, got ", dtype_name(opt.dtype));
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opt);
  fill_with(t, [&](int64_t) { return g.normal(); });
  return t;
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt, Generator* gen) {
  check_cpu_factory(opt, "randint");
  KILN_CHECK(high > low, "randint: expected low < high, got [", low, ", ", high, ")");
  Generator& g = gen ? *gen : default_generator();
  Tensor t = empty(shape, opt);
  uint64_t range = static_cast<uint64_t>(high - low);
  fill_with(t, [&](int64_t) { return static_cast<double>(low + static_cast<int64_t>(g.next_u64() % range)); });
  return t;
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), TensorOptions(t.dtype(), t.device())); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), TensorOptions(t.dtype(), t.device())); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), TensorOptions(t.dtype(), t.device())); }
Tensor full_like(const Tensor& t, Scalar v) { return full(t.shape(), v, TensorOptions(t.dtype(), t.device())); }

Tensor scalar_tensor(Scalar value, TensorOptions opt) { return full({}, value, opt); }

Tensor wrap_scalar(Scalar s, DType like) { return scalar_tensor(s, TensorOptions(s.result_type_with(like))); }

template <>
Tensor from_vector<bool>(const std::vector<bool>& values, std::optional<Shape> shape) {
  Shape s = shape ? *shape : Shape{static_cast<int64_t>(values.size())};
  KILN_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
             " values do not fill shape ", shape_str(s));
  Tensor t = empty(s, TensorOptions(DType::boolean));
  bool* dst = t.data<bool>();
  for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  return t;
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive) {
  size_t nbytes = static_cast<size_t>(numel_of(shape)) * dtype_size(dtype);
  auto storage = std::make_shared<StorageImpl>(data, nbytes, Device::cpu(), std::move(keep_alive));
  return make_tensor(std::move(storage), 0, shape, contiguous_strides(shape), dtype);
}

}  // namespace kiln
