// Helpers shared by the compiler's passes (src/compiler/passes/*.cc): constants, use counts,
// topological re-ordering after a pass appends replacement nodes, and report lines.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/compiler.h"

namespace kiln::compiler::passes {

inline bool is_const(const ir::Value* v) { return v && v->kind() == ir::Value::Kind::constant; }
// Input i of n, or nullptr when absent (the text IR may omit trailing optional inputs).
inline ir::Value* input_at(const ir::Node* n, size_t i) { return i < n->inputs().size() ? n->inputs()[i] : nullptr; }
bool is_graph_output(const ir::Graph& g, const ir::Value* v);
// v as a report writes it (ostream's default: six significant digits).
std::string format_double(double v);
// How many node inputs and graph outputs read v.
size_t use_count(const std::map<const ir::Value*, std::vector<ir::Use>>& uses, const ir::Value* v);

// Values of a constant (any dtype) as doubles, in row-major order.
std::vector<double> const_values(const ir::Value* v);
// A tensor of `dtype` and `shape` from doubles.
Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype);

// An inference batch_norm over `channels` channels as y = x * scale + shift per channel (in
// float64), or nullopt when its statistics are not all constants of that length.
struct BatchNormAffine {
  std::vector<double> scale, shift;
};
std::optional<BatchNormAffine> batch_norm_affine(const ir::Node* bn, int64_t channels);

// The values of a floating constant with one value per channel, laid out to broadcast over a
// convolution's output ([C, 1, 1] or [1, C, 1, 1]: conv) or a GEMM's ([C] or [1, C]), or nullopt.
std::optional<std::vector<double>> per_channel_values(const ir::Value* c, int64_t channels, bool conv);

// The activation n applies, as a fused op's `activation` attribute (relu6 for clip(0, 6)), or
// nullopt when n is not one.
std::optional<std::string> activation_of(const ir::Node* n);

// reshape, squeeze or unsqueeze: a change of shape alone.
bool is_reshape_like(const ir::Node* n);
// The reshape target for a value type: static dims as they are, at most one symbolic dim as -1
// (nullopt for more).
std::optional<std::vector<int64_t>> reshape_target(const ir::ValueType& t);

// A permute's dims with negative entries counted from the end; whether dims are the identity.
std::vector<int64_t> normalized_perm(const std::vector<int64_t>& dims);
bool is_identity_perm(const std::vector<int64_t>& dims);

// Re-orders g's nodes topologically, keeping the current order where it already is one. Passes
// that append a replacement node (Graph::add_node appends) call this before returning.
// Note [Appending then re-ordering]: the Graph API only appends nodes; rebuilding the graph in a
// dependency-respecting order keeps every value name and type, so reports and tests stay stable.
void topo_reorder(ir::Graph& g);

// A report line: "<pass>: <verb> N node(s): item; item" or "<pass>: <nothing>".
ir::PassResult report(const std::string& pass, const std::string& verb, const std::vector<std::string>& items,
                      const std::string& nothing);

// Pass factories (one file each).
std::unique_ptr<ir::Pass> make_fold();
std::unique_ptr<ir::Pass> make_identity();
std::unique_ptr<ir::Pass> make_reshape();
std::unique_ptr<ir::Pass> make_transpose();
std::unique_ptr<ir::Pass> make_unstack();
std::unique_ptr<ir::Pass> make_bn_fold();
std::unique_ptr<ir::Pass> make_branch_merge();
std::unique_ptr<ir::Pass> make_pad_fold();
std::unique_ptr<ir::Pass> make_epilogue();
std::unique_ptr<ir::Pass> make_eltwise();
std::unique_ptr<ir::Pass> make_layer_norm_fusion();
std::unique_ptr<ir::Pass> make_gelu_fusion();
std::unique_ptr<ir::Pass> make_rotary_fusion();
std::unique_ptr<ir::Pass> make_attention_fusion();
std::unique_ptr<ir::Pass> make_layout();
std::unique_ptr<ir::Pass> make_layout_all();

}  // namespace kiln::compiler::passes
