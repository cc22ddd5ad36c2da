// Function transforms. For now: trace(f, example_inputs) runs f on tracer tensors and returns the
// ir::Graph of what it computed (Note [Tracing] in src/fn/trace.cc).
#pragma once

#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/ir.h"

namespace kiln::fn {

struct TraceOptions {
  std::vector<std::string> input_names;  // default x0, x1, ...
  std::vector<std::string> output_names;  // default: the values keep their names (v0, v1, ...)
  // Inputs whose dim 0 becomes the symbol `batch_symbol` in the graph (empty: all static).
  std::vector<size_t> batch_inputs;
  std::string batch_symbol = "batch";
  std::string graph_name = "main";
};

using TracedFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

ir::Graph trace(const TracedFn& f, const std::vector<Tensor>& example_inputs, const TraceOptions& opt = {});

// Single-output functions: [](const std::vector<Tensor>& xs) { return xs[0].exp(); }
template <class F>
  requires(std::is_invocable_r_v<Tensor, F, const std::vector<Tensor>&> &&
           !std::is_invocable_r_v<std::vector<Tensor>, F, const std::vector<Tensor>&>)
ir::Graph trace(F&& f, const std::vector<Tensor>& example_inputs, const TraceOptions& opt = {}) {
  return trace(TracedFn([&f](const std::vector<Tensor>& xs) { return std::vector<Tensor>{f(xs)}; }), example_inputs,
               opt);
}

// True while a trace is being recorded on this thread.
bool is_tracing();

}  // namespace kiln::fn
