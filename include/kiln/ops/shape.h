// Shape and data-movement ops. Views live on Tensor (view, transpose, slice, ...); these are the
// free-function forms plus the ops that make new tensors.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor reshape(const Tensor& x, const Shape& shape, SourceLoc loc = KILN_HERE);  // one -1 allowed
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, SourceLoc loc = KILN_HERE);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims, SourceLoc loc = KILN_HERE);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1, SourceLoc loc = KILN_HERE);
Tensor squeeze(const Tensor& x, const std::vector<int64_t>& dims = {}, SourceLoc loc = KILN_HERE);
Tensor unsqueeze(const Tensor& x, int64_t dim, SourceLoc loc = KILN_HERE);
Tensor expand(const Tensor& x, const Shape& shape, SourceLoc loc = KILN_HERE);
// ONNX Slice: per listed axis, Python-style start/end clamping and negative steps.
Tensor slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             const std::vector<int64_t>& axes = {}, const std::vector<int64_t>& steps = {},
             SourceLoc loc = KILN_HERE);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc = KILN_HERE);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0, SourceLoc loc = KILN_HERE);
// Pieces of the given sizes along axis (they must add up to the dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis = 0,
                          SourceLoc loc = KILN_HERE);
// `chunks` near-equal pieces (the last may be smaller), like torch.chunk / ONNX num_outputs.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis = 0, SourceLoc loc = KILN_HERE);
Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats, SourceLoc loc = KILN_HERE);
// pads: ONNX order [x1_begin, x2_begin, ..., x1_end, x2_end, ...] over all dims (negative crops);
// mode: "constant", "reflect", "edge".
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode = "constant",
           double value = 0.0, SourceLoc loc = KILN_HERE);
// Upper (triu) or lower (tril) triangle of the last two dims, diagonal offset k.
Tensor trilu(const Tensor& x, int64_t k = 0, bool upper = true, SourceLoc loc = KILN_HERE);

}  // namespace kiln
