// Tensor: a cheap, shared handle to a strided view of a Storage.
//
// Views (view/reshape when strides allow, transpose, permute, slice, expand, squeeze, unsqueeze)
// share storage and never copy. The math methods are thin wrappers over the free functions of
// include/kiln/ops/*.h, which go through the op dispatcher. Calls that may show up in an error
// message later (autograd's saved-tensor check) take a std::source_location defaulted to the
// caller's line.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/scalar.h"
#include "kiln/core/shape.h"
#include "kiln/core/storage.h"

namespace kiln {

using SourceLoc = std::source_location;
namespace autograd {
class Node;  // include/kiln/autograd.h
}
#define KILN_HERE ::std::source_location::current()

// Extra state that upper layers (autograd, tracing) attach to a tensor. core knows only this
// interface, so the layering stays one-way.
struct TensorExtension {
  virtual ~TensorExtension() = default;
};

// A layer that attaches a TensorExtension marking a tensor as symbolic (a tracer) registers a
// checker here; data access on such a tensor throws the message it returns.
struct SymbolicTensorInfo : TensorExtension {
  virtual std::string data_access_error(const char* accessor) const = 0;
};

struct TensorImpl {
  Storage storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;     // in elements; 0 for broadcast dims
  DType dtype = DType::f32;
  Device device;
  std::shared_ptr<TensorExtension> autograd_meta;        // owned by autograd/
  std::shared_ptr<SymbolicTensorInfo> symbolic;          // set by fn/ tracing
};

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  TensorOptions() = default;
  TensorOptions(DType t) : dtype(t) {}  // NOLINT: zeros({2}, DType::i64) reads well
  TensorOptions(DType t, Device d) : dtype(t), device(d) {}
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // --- metadata -------------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  const Strides& strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;    // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t numel() const { return numel_of(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  int64_t storage_offset() const { return impl().offset; }
  size_t element_size() const { return dtype_size(impl().dtype); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const Storage& storage() const { return impl().storage; }
  uint64_t version() const;  // the storage's version counter
  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  std::string str() const;  // NumPy-like printing; also operator<<

  // --- element access (CPU only; kiln::Error on a dtype mismatch or a traced tensor) -----------
  void* data_ptr() const;  // address of element 0 of this view
  template <class T> T* data() const {
    check_data_access(dtype_of<T>, "data<T>()");
    return static_cast<T*>(data_ptr());
  }
  template <class T> T item() const;  // one element, converted to T

  // --- views (share storage) --------------------------------------------------------------------
  Tensor view(const Shape& shape, SourceLoc loc = KILN_HERE) const;     // error if strides forbid
  Tensor reshape(const Shape& shape, SourceLoc loc = KILN_HERE) const;  // view if possible, else copy
  Tensor transpose(int64_t d0, int64_t d1, SourceLoc loc = KILN_HERE) const;
  Tensor t(SourceLoc loc = KILN_HERE) const;  // transpose of a 2-D tensor
  Tensor permute(const std::vector<int64_t>& dims, SourceLoc loc = KILN_HERE) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1,
               SourceLoc loc = KILN_HERE) const;  // Python semantics for negative/out of range
  Tensor select(int64_t dim, int64_t index, SourceLoc loc = KILN_HERE) const;  // drops `dim`
  Tensor expand(const Shape& shape, SourceLoc loc = KILN_HERE) const;  // -1 keeps a dim
  Tensor broadcast_to(const Shape& shape, SourceLoc loc = KILN_HERE) const;
  Tensor squeeze(SourceLoc loc = KILN_HERE) const;                     // all size-1 dims
  Tensor squeeze(int64_t dim, SourceLoc loc = KILN_HERE) const;
  Tensor unsqueeze(int64_t dim, SourceLoc loc = KILN_HERE) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1, SourceLoc loc = KILN_HERE) const;

  // --- copies and conversion --------------------------------------------------------------------
  Tensor contiguous(SourceLoc loc = KILN_HERE) const;  // this tensor when already contiguous
  Tensor clone(SourceLoc loc = KILN_HERE) const;
  Tensor to(DType dtype, SourceLoc loc = KILN_HERE) const;  // this tensor when dtype matches
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }

  // --- math (see include/kiln/ops/*.h for the semantics) ----------------------------------------
  Tensor neg(SourceLoc loc = KILN_HERE) const;
  Tensor abs(SourceLoc loc = KILN_HERE) const;
  Tensor exp(SourceLoc loc = KILN_HERE) const;
  Tensor log(SourceLoc loc = KILN_HERE) const;
  Tensor sqrt(SourceLoc loc = KILN_HERE) const;
  Tensor rsqrt(SourceLoc loc = KILN_HERE) const;
  Tensor reciprocal(SourceLoc loc = KILN_HERE) const;
  Tensor sin(SourceLoc loc = KILN_HERE) const;
  Tensor cos(SourceLoc loc = KILN_HERE) const;
  Tensor tanh(SourceLoc loc = KILN_HERE) const;
  Tensor sigmoid(SourceLoc loc = KILN_HERE) const;
  Tensor relu(SourceLoc loc = KILN_HERE) const;
  Tensor erf(SourceLoc loc = KILN_HERE) const;
  Tensor floor(SourceLoc loc = KILN_HERE) const;
  Tensor ceil(SourceLoc loc = KILN_HERE) const;
  Tensor round(SourceLoc loc = KILN_HERE) const;
  Tensor sign(SourceLoc loc = KILN_HERE) const;
  Tensor clip(std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc = KILN_HERE) const;

  Tensor add(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor sub(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor mul(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor div(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor pow(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor maximum(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor minimum(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor eq(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor ne(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor lt(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor le(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor gt(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor ge(const Tensor& o, SourceLoc loc = KILN_HERE) const;
  Tensor matmul(const Tensor& o, SourceLoc loc = KILN_HERE) const;

  Tensor sum(const std::vector<int64_t>& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor mean(const std::vector<int64_t>& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor max(const std::vector<int64_t>& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor min(const std::vector<int64_t>& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor prod(const std::vector<int64_t>& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor argmax(int64_t axis, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor argmin(int64_t axis, bool keepdim = false, SourceLoc loc = KILN_HERE) const;
  Tensor softmax(int64_t axis, SourceLoc loc = KILN_HERE) const;
  Tensor log_softmax(int64_t axis, SourceLoc loc = KILN_HERE) const;

  // --- in place: write into this tensor's storage and bump its version --------------------------
  Tensor& add_(const Tensor& o, SourceLoc loc = KILN_HERE);
  Tensor& sub_(const Tensor& o, SourceLoc loc = KILN_HERE);
  Tensor& mul_(const Tensor& o, SourceLoc loc = KILN_HERE);
  Tensor& div_(const Tensor& o, SourceLoc loc = KILN_HERE);
  // Scalar forms (y.mul_(2)): the scalar takes the tensor's dtype as in x * 2.
  Tensor& add_(Scalar o, SourceLoc loc = KILN_HERE);
  Tensor& sub_(Scalar o, SourceLoc loc = KILN_HERE);
  Tensor& mul_(Scalar o, SourceLoc loc = KILN_HERE);
  Tensor& div_(Scalar o, SourceLoc loc = KILN_HERE);
  Tensor& copy_(const Tensor& src, SourceLoc loc = KILN_HERE);  // broadcasts and casts src
  Tensor& fill_(Scalar value, SourceLoc loc = KILN_HERE);
  Tensor& zero_(SourceLoc loc = KILN_HERE);
  Tensor& relu_(SourceLoc loc = KILN_HERE);
  Tensor& sigmoid_(SourceLoc loc = KILN_HERE);
  Tensor& tanh_(SourceLoc loc = KILN_HERE);
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc = KILN_HERE);
  Tensor& cumsum_(int64_t axis, SourceLoc loc = KILN_HERE);
  // A <- A @ B for a square B, an r-row panel at a time (O(r * k) extra memory).
  Tensor& matmul_(const Tensor& b, SourceLoc loc = KILN_HERE);

  // --- autograd (declared here, defined in src/autograd; see include/kiln/autograd.h) -----------
  Tensor& requires_grad_(bool requires_grad = true);  // floating leaves only
  bool requires_grad() const;
  bool is_leaf() const;   // true for tensors without a grad_fn
  Tensor grad() const;    // accumulated gradient of a leaf (undefined if none yet)
  void set_grad(const Tensor& g) const;  // replaces it (undefined clears it)
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Gradient of this tensor w.r.t. every leaf, accumulated into their grad(). `gradient` may be
  // omitted for a one-element tensor (ones).
  void backward(const Tensor& gradient = {}, bool retain_graph = false, bool create_graph = false) const;
  Tensor detach() const;  // shares storage, no history
  void retain_grad() const;  // a non-leaf keeps its grad() too
  // Called with the gradient of this tensor during backward; a defined return value replaces it.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;

 private:
  void check_data_access(DType want, const char* accessor) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- factories (not ops: they read no tensor) -----------------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opt = {});
Tensor zeros(const Shape& shape, TensorOptions opt = {});
Tensor ones(const Shape& shape, TensorOptions opt = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions opt = {});
Tensor arange(Scalar end, TensorOptions opt = {});            // dtype from opt (default f32)
Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions opt = {});
Tensor linspace(double start, double end, int64_t steps, TensorOptions opt = {});
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions opt = {});
class Generator;
Tensor rand(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr);   // U[0, 1)
Tensor randn(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr);  // N(0, 1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt = DType::i64,
               Generator* gen = nullptr);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor scalar_tensor(Scalar value, TensorOptions opt = {});  // 0-d
// From values: T decides the dtype; shape defaults to 1-D of values.size().
template <class T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape = std::nullopt);
// A tensor over caller-owned CPU memory (not copied); keep_alive is held as long as the storage.
Tensor from_blob(void* data, const Shape& shape, DType dtype, std::shared_ptr<void> keep_alive = {});
// Makes a tensor with an explicit layout over existing storage (used by views and kernels).
Tensor make_tensor(Storage storage, int64_t offset, Shape shape, Strides strides, DType dtype);

// --- operators --------------------------------------------------------------------------------------
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(Scalar a, const Tensor& b);

// A 0-d tensor holding `s` in the dtype it takes beside a tensor of dtype `like` (see Scalar).
Tensor wrap_scalar(Scalar s, DType like);

// --- template definitions -----------------------------------------------------------------------------
template <class T>
T Tensor::item() const {
  KILN_CHECK(numel() == 1, "item(): expected a tensor with one element, got shape ", shape_str(shape()));
  check_data_access(dtype(), "item()");
  const char* p = static_cast<const char*>(data_ptr());
  return visit_dtype(dtype(), [&](auto tag) -> T {
    using S = typename decltype(tag)::type;
    return convert<T>(*reinterpret_cast<const S*>(p));
  });
}

template <class T>
Tensor from_vector(const std::vector<T>& values, std::optional<Shape> shape) {
  Shape s = shape ? *shape : Shape{static_cast<int64_t>(values.size())};
  KILN_CHECK(numel_of(s) == static_cast<int64_t>(values.size()), "from_vector: ", values.size(),
             " values do not fill shape ", shape_str(s));
  Tensor t = empty(s, TensorOptions(dtype_of<T>));
  T* dst = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) dst[i] = values[i];
  return t;
}
template <>
Tensor from_vector<bool>(const std::vector<bool>& values, std::optional<Shape> shape);

}  // namespace kiln
