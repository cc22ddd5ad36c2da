// Indexing ops: gather, scatter, one_hot, top-k. Negative indices count from the end; an index
// out of range is a kiln::Error naming the op, the index value and its position.
#pragma once

#include <utility>

#include "kiln/core/tensor.h"

namespace kiln {

// ONNX Gather: out shape = x.shape[:axis] + indices.shape + x.shape[axis+1:].
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis = 0, SourceLoc loc = KILN_HERE);
// ONNX GatherElements / torch.gather: out[i][j] = x[index[i][j]][j] for axis 0.
Tensor gather_elements(const Tensor& x, const Tensor& index, int64_t axis, SourceLoc loc = KILN_HERE);
// index is 1-D.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index, SourceLoc loc = KILN_HERE);
// ONNX ScatterElements (reduction none) / torch.scatter: a copy of x with out[index[i][j]][j] =
// src[i][j] for axis 0.
Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, SourceLoc loc = KILN_HERE);
// ONNX ScatterElements with reduction add: a copy of x with out[index[i][j]][j] += src[i][j]
// (axis 0); repeated indices accumulate. Floating dtypes.
Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, SourceLoc loc = KILN_HERE);
// ONNX GatherND: the last dim of indices holds m coordinates into x's dims [batch_dims,
// batch_dims + m); out shape = indices.shape[:-1] + x.shape[batch_dims + m:].
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims = 0, SourceLoc loc = KILN_HERE);
// ONNX ScatterND: a copy of x with x[indices[i..., :]] replaced by (reduction "none") or combined
// with ("add", "mul", "max", "min") updates[i...]; updates shape = indices.shape[:-1] + x.shape[m:].
// Tuples apply in index order (a repeated index with "none" keeps the last update).
Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction = "none",
                  SourceLoc loc = KILN_HERE);
// One-hot along a new axis (default last) of size `depth`, dtype `dtype`.
Tensor one_hot(const Tensor& indices, int64_t depth, int64_t axis = -1, DType dtype = DType::f32,
               SourceLoc loc = KILN_HERE);
// Values and i64 indices of the k largest (or smallest) along axis; ties keep the lower index.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true,
                               bool sorted = true, SourceLoc loc = KILN_HERE);

}  // namespace kiln
