// Tracing: run a C++ function on tracer tensors and record the ops it calls into an ir::Graph.
#include <atomic>
#include <map>
#include <mutex>

#include "kiln/fn.h"
#include "kiln/ops/dispatch.h"

namespace kiln::fn {

// Note [Tracing]
// trace() makes a tracer tensor per example input: a TensorImpl with the example's shape and
// dtype, no storage, and `symbolic` set to a TracerInfo pointing at its ir::Value. The tracing
// interceptor (order 100, before autograd) sees every dispatched call; one with a tracer input is
// appended to the graph instead of run: output types come from the op's own inference on IR types
// (symbolic dims included, Note [Symbolic dims] in src/ir/infer.cc), and the tracers returned
// carry the concrete shapes the example inputs imply, which must agree with the symbolic types
// once the symbol is bound to the example's size; otherwise the function used the concrete batch
// size somewhere (a reshape to [4, -1]) and the trace fails rather than record a wrong graph.
// Real tensors that meet tracers (captured weights, scalar_tensor(2.0)) become constants, copied
// at trace time. Calls without tracer inputs run eagerly, so constant-only work is folded.
// Reading a tracer's data (item(), data<T>(), data_ptr()) throws an error naming the op that
// produced it. In-place ops on tracers are recorded out of place and rebind the handle; that is
// only sound when no other handle aliases the tensor, so an in-place op on a traced view, or on a
// traced value that has views, is refused with an explanation.
namespace {

struct TraceState;
thread_local TraceState* g_active = nullptr;
std::atomic<uint64_t> g_next_trace_id{1};

struct TracerInfo : SymbolicTensorInfo {
  uint64_t trace_id = 0;
  ir::Value* value = nullptr;  // valid while its trace runs
  std::string desc;            // "%v3 (f32[2, 3])": usable after the trace ends
  std::string origin;  // "the traced input 'x0'" / "op 'sum' (called at f.cc:12)"
  bool is_view = false;
  bool has_views = false;
  std::string data_access_error(const char* accessor) const override {
    return std::string(accessor) + ": cannot read the data of " + desc + ", produced by " + origin +
           ", while tracing: its value is unknown until the graph runs. Return it from the traced function "
           "instead, and do not branch on traced values (control flow is fixed when tracing).";
  }
};

struct TraceState {
  uint64_t id = g_next_trace_id++;
  ir::Graph graph;
  std::map<const TensorImpl*, ir::Value*> constants;
  std::vector<Tensor> keep_alive;  // real tensors memoized by address must outlive the trace
  std::string batch_symbol;
  int64_t batch_size = -1;
};

TracerInfo* tracer_of(const Tensor& t) {
  if (!t.defined() || !t.impl().symbolic) return nullptr;
  return dynamic_cast<TracerInfo*>(t.impl().symbolic.get());
}

Tensor make_tracer(const TensorMeta& m, ir::Value* v, std::string origin, uint64_t trace_id) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = m.shape;
  impl->strides = contiguous_strides(m.shape);
  impl->dtype = m.dtype;
  impl->device = Device::cpu();
  auto info = std::make_shared<TracerInfo>();
  info->trace_id = trace_id;
  info->value = v;
  info->desc = "%" + v->name() + " (" + ir::type_str(v->type()) + ")";
  info->origin = std::move(origin);
  impl->symbolic = std::move(info);
  return Tensor(std::move(impl));
}

std::string site(const SourceLoc& loc) {
  std::string f = loc.file_name();
  auto slash = f.rfind('/');
  if (slash != std::string::npos) f = f.substr(slash + 1);
  return f + ":" + std::to_string(loc.line());
}

ir::Value* value_for(TraceState& st, const Tensor& t) {
  if (TracerInfo* info = tracer_of(t)) return info->value;
  auto it = st.constants.find(t.impl_ptr().get());
  if (it != st.constants.end()) return it->second;
  ir::Value* c = st.graph.add_constant("", t.clone());
  st.constants[t.impl_ptr().get()] = c;
  st.keep_alive.push_back(t);
  return c;
}

class TracingInterceptor : public Interceptor {
 public:
  const char* name() const override { return "tracing"; }
  std::vector<Tensor> intercept(OpCall& call, const std::function<std::vector<Tensor>(OpCall&)>& next) override {
    TraceState* st = g_active;
    bool any = false;
    for (const Tensor& t : call.inputs) {
      TracerInfo* info = tracer_of(t);
      if (!info) continue;
      KILN_CHECK(st && info->trace_id == st->id, call.op.name(), " (called at ", site(call.loc), "): input ",
                 info->desc, " is a traced value from a trace that has finished; traced values exist only "
                 "inside the function being traced (run the graph with kiln::ir::run to get data)");
      any = true;
    }
    if (!any) return next(call);
    return record(*st, call);
  }

 private:
  std::vector<Tensor> record(TraceState& st, OpCall& call) {
    const OpDef& op = call.op;
    std::string where = "op '" + op.name() + "' (called at " + site(call.loc) + ")";
    if (call.is_inplace()) {
      TracerInfo* self = tracer_of(call.inplace_out);
      KILN_CHECK(self, call.inplace_name, " at ", site(call.loc),
                 ": writes a traced value into a tensor that is not traced; a trace cannot change real tensors. "
                 "Use the out-of-place form and return the result");
      KILN_CHECK(!self->is_view && !self->has_views, call.inplace_name, " at ", site(call.loc), ": in-place update of %",
                 self->value->name(), ", which ", self->is_view ? "is a view of another traced value" : "has views",
                 "; tracing records in-place ops out of place and cannot update the aliases. Use the out-of-place form");
    }
    std::vector<ir::Value*> ins;
    for (const Tensor& t : call.inputs) ins.push_back(t.defined() ? value_for(st, t) : nullptr);
    ir::Node* node = nullptr;
    try {
      node = st.graph.add_node(op, ins, call.attrs);
    } catch (const Error& e) {
      KILN_FAIL("while tracing ", where, ": ", e.what(),
                st.batch_size >= 0 ? "; with a symbolic batch, write shapes without the example's batch size "
                                     "(use -1 or sizes of the traced tensors' other dims)"
                                   : "");
    }
    std::vector<TensorMeta> metas = infer_call(op, call.inputs, call.attrs);
    KILN_ASSERT(metas.size() == node->outputs().size(), "tracing: output count mismatch for ", op.name());
    std::vector<Tensor> outs;
    for (size_t i = 0; i < metas.size(); ++i) {
      ir::Value* v = node->outputs()[i];
      const ir::ValueType& t = v->type();
      bool consistent = t.dtype == metas[i].dtype && t.shape.size() == metas[i].shape.size();
      for (size_t d = 0; consistent && d < t.shape.size(); ++d) {
        int64_t want = t.shape[d].at(st.batch_size);
        consistent = want == metas[i].shape[d];
      }
      KILN_CHECK(consistent, "while tracing ", where, ": output ", i, " is ", meta_str(metas[i]),
                 " for the example inputs but ", ir::type_str(t), " for a general '", st.batch_symbol,
                 "': the function depends on the example's batch size (e.g. a reshape to a fixed size); "
                 "use -1 for that dim or trace without a symbolic batch");
      if (call.is_inplace()) {
        KILN_CHECK(metas[i].shape == call.inplace_out.shape() && (metas[i].dtype == call.inplace_out.dtype() || op.name() == "copy"),
                   call.inplace_name, " at ", site(call.loc), ": the result ", meta_str(metas[i]),
                   " does not fit the tensor written in place");
      }
      outs.push_back(make_tracer(metas[i], v, where, st.id));
    }
    if (op.is_view()) {
      for (const Tensor& t : call.inputs)
        if (TracerInfo* info = tracer_of(t)) info->has_views = true;
      for (Tensor& o : outs) tracer_of(o)->is_view = true;
    }
    return outs;
  }
};

void ensure_registered() {
  static std::once_flag once;
  static TracingInterceptor interceptor;
  std::call_once(once, [] { register_interceptor(100, &interceptor); });
}

struct ActiveGuard {
  explicit ActiveGuard(TraceState* st) { g_active = st; }
  ~ActiveGuard() { g_active = nullptr; }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;
};

}  // namespace

bool is_tracing() { return g_active != nullptr; }

ir::Graph trace(const TracedFn& f, const std::vector<Tensor>& example_inputs, const TraceOptions& opt) {
  KILN_CHECK(!g_active, "trace: already tracing on this thread; nested traces are not supported");
  KILN_CHECK(opt.input_names.empty() || opt.input_names.size() == example_inputs.size(), "trace: ",
             opt.input_names.size(), " input names for ", example_inputs.size(), " inputs");
  ensure_registered();
  TraceState st;
  st.graph.name = opt.graph_name;
  st.batch_symbol = opt.batch_symbol;
  std::vector<bool> batched(example_inputs.size(), false);
  for (size_t i : opt.batch_inputs) {
    KILN_CHECK(i < example_inputs.size(), "trace: batch input index ", i, " out of range (", example_inputs.size(),
               " inputs)");
    batched[i] = true;
  }
  std::vector<Tensor> tracers;
  for (size_t i = 0; i < example_inputs.size(); ++i) {
    const Tensor& x = example_inputs[i];
    KILN_CHECK(x.defined(), "trace: example input ", i, " is an undefined tensor");
    KILN_CHECK(!tracer_of(x), "trace: example input ", i, " is itself a traced value");
    std::string name = opt.input_names.empty() ? std::string("x").append(std::to_string(i)) : opt.input_names[i];
    ir::ValueType t{x.dtype(), ir::static_shape(x.shape())};
    if (batched[i]) {
      KILN_CHECK(x.dim() >= 1, "trace: input '", name, "' is a scalar and cannot have a batch dim");
      KILN_CHECK(st.batch_size < 0 || st.batch_size == x.size(0), "trace: batch inputs disagree on the batch size: '",
                 name, "' has ", x.size(0), ", an earlier one ", st.batch_size);
      st.batch_size = x.size(0);
      t.shape[0] = ir::Dim::sym(opt.batch_symbol);
    }
    ir::Value* v = st.graph.add_input(name, t);
    tracers.push_back(make_tracer(TensorMeta{x.dtype(), x.shape()}, v, "the traced input '" + name + "'", st.id));
  }
  std::vector<Tensor> results;
  {
    ActiveGuard guard(&st);
    results = f(tracers);
  }
  KILN_CHECK(opt.output_names.empty() || opt.output_names.size() == results.size(), "trace: ",
             opt.output_names.size(), " output names for ", results.size(), " outputs");
  for (size_t i = 0; i < results.size(); ++i) {
    const Tensor& r = results[i];
    KILN_CHECK(r.defined(), "trace: output ", i, " of the traced function is an undefined tensor");
    TracerInfo* info = tracer_of(r);
    KILN_CHECK(!info || info->trace_id == st.id, "trace: output ", i, " comes from a different trace");
    ir::Value* v = info ? info->value : value_for(st, r);
    st.graph.add_output(v);
    if (!opt.output_names.empty()) st.graph.rename(v, opt.output_names[i]);
  }
  ir::Graph g = std::move(st.graph);
#ifndef NDEBUG
  ir::verify(g);
#endif
  return g;
}

}  // namespace kiln::fn
