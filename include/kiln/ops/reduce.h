// Reductions over any set of axes (empty = all), with keepdim.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

using Axes = std::vector<int64_t>;

// sum/prod of bool and integer inputs give i64 (PyTorch); floating stays, accumulating in at
// least f32 (f64 for f64).
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
Tensor prod(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
// Values only (like torch.amax); NaN propagates. Empty reductions are a kiln::Error.
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
// i64 index of the first extreme along `axis` (select_last_index picks the last tie).
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false, bool select_last_index = false,
              SourceLoc loc = KILN_HERE);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim = false, bool select_last_index = false,
              SourceLoc loc = KILN_HERE);
// correction: 1 = unbiased (PyTorch default), 0 = population.
Tensor var(const Tensor& x, const Axes& axes = {}, int64_t correction = 1, bool keepdim = false,
           SourceLoc loc = KILN_HERE);
Tensor std_dev(const Tensor& x, const Axes& axes = {}, int64_t correction = 1, bool keepdim = false,
           SourceLoc loc = KILN_HERE);
Tensor logsumexp(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);
Tensor norm(const Tensor& x, const Axes& axes = {}, bool keepdim = false, SourceLoc loc = KILN_HERE);  // L2

}  // namespace kiln
