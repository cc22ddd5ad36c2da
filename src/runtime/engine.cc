// Engines: building one from a graph (compile), describing it, and checking its invariants.
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "compiler/memory_plan.h"
#include "runtime/tactics.h"
#include "kiln/runtime.h"
#include "kiln/version.h"

namespace kiln::runtime {

namespace {

// a *= b when the product fits in int64 (a, b >= 0); false otherwise. (Division, not
// __builtin_mul_overflow, which GCC's UBSan instruments as a plain multiply.)
bool mul_fits(int64_t& a, int64_t b) {
  if (b != 0 && a > std::numeric_limits<int64_t>::max() / b) return false;
  a *= b;
  return true;
}

std::string value_kind_name(EngineValue::Kind k) {
  switch (k) {
    case EngineValue::Kind::input: return "input";
    case EngineValue::Kind::constant: return "constant";
    case EngineValue::Kind::arena: return "arena";
    case EngineValue::Kind::view: return "view";
  }
  return "?";
}

// The batch symbol: the first input's leading dim when symbolic, else the graph's only symbol.
std::string find_batch_symbol(const ir::Graph& g) {
  std::set<std::string> symbols;
  auto collect = [&](const ir::Value* v) {
    for (const ir::Dim& d : v->type().shape)
      if (d.is_symbolic()) symbols.insert(d.symbol);
  };
  for (const ir::Value* v : g.inputs()) collect(v);
  for (const ir::Node* n : g.nodes())
    for (const ir::Value* v : n->outputs()) collect(v);
  if (symbols.empty()) return "";
  std::string batch;
  if (!g.inputs().empty() && !g.inputs()[0]->type().shape.empty() && g.inputs()[0]->type().shape[0].is_symbolic())
    batch = g.inputs()[0]->type().shape[0].symbol;
  else if (symbols.size() == 1)
    batch = *symbols.begin();
  for (const auto& s : symbols)
    KILN_CHECK(s == batch, "compile graph '", g.name, "': dim '", s, "' is symbolic, but an engine may only vary ",
               batch.empty() ? std::string("one batch dim") : "its batch dim '" + batch + "'",
               "; fix its size when loading the model (kiln compile --dim ", s, "=N)");
  return batch;
}

}  // namespace

std::string MemoryStats::summary() const {
  return compiler::memory_summary(arena_bytes, sum_bytes, lower_bound, buffers, inplace, views);
}

std::string Engine::signature_str() const {
  std::ostringstream os;
  auto sig = [&](const char* title, const std::vector<int32_t>& ids, const std::vector<std::string>& names) {
    os << title << ":\n";
    for (size_t i = 0; i < ids.size(); ++i) {
      const EngineValue& v = values[static_cast<size_t>(ids[i])];
      os << "  " << (i < names.size() ? names[i] : v.name) << ": " << ir::type_str(ir::ValueType{v.dtype, v.shape}) << "\n";
    }
  };
  sig("inputs", inputs, input_names);
  sig("outputs", outputs, output_names);
  if (!batch.symbol.empty()) os << "batch: " << batch.symbol << " in [" << batch.min << ", " << batch.max << "]\n";
  else os << "batch: static shapes\n";
  return os.str();
}

std::string Engine::steps_str() const {
  std::ostringstream os;
  auto slot = [&](int32_t id) -> std::string {
    if (id < 0) return "_";
    const EngineValue& v = values[static_cast<size_t>(id)];
    std::string s = "%" + v.name;
    switch (v.kind) {
      case EngineValue::Kind::input: return s + "@input" + std::to_string(v.index);
      case EngineValue::Kind::constant: return s + "@const" + std::to_string(v.index);
      case EngineValue::Kind::arena:
        return s + "@" + std::to_string(v.offset) + "+" + std::to_string(v.bytes) + (batch.symbol.empty() ? "" : "/b");
      case EngineValue::Kind::view: return s + "@view";
    }
    return s;
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const EngineStep& st = steps[i];
    os << "  #" << i << " ";
    for (size_t k = 0; k < st.outputs.size(); ++k) os << (k ? ", " : "") << slot(st.outputs[k]);
    os << " = " << st.op->name() << "(";
    for (size_t k = 0; k < st.inputs.size(); ++k) os << (k ? ", " : "") << slot(st.inputs[k]);
    os << ")";
    if (!st.tactic.empty()) {
      os << " [" << st.tactic;
      if (!st.small_tactic.empty()) os << "; " << st.small_tactic << " at batch <= " << st.small_batch_max;
      os << "]";
    }
    if (!st.attrs.values().empty()) {
      os << " {";
      bool first = true;
      for (const auto& [k, v] : st.attrs.values()) {
        os << (first ? "" : ", ") << k << "=" << attr_value_str(v);
        first = false;
      }
      os << "}";
    }
    os << "\n";
  }
  return os.str();
}

void Engine::validate() const {
  const int32_t nv = static_cast<int32_t>(values.size());
  auto check_id = [&](int32_t id, bool allow_absent, const std::string& where) {
    KILN_CHECK((allow_absent && id == -1) || (id >= 0 && id < nv), "engine '", name, "': ", where,
               " refers to value ", id, " but the engine has ", nv, " values");
  };
  KILN_CHECK(memory.arena_bytes >= 0, "engine '", name, "': negative arena size ", memory.arena_bytes);
  KILN_CHECK(batch.min >= 1 && batch.min <= batch.max, "engine '", name, "': batch range [", batch.min, ", ",
             batch.max, "] is empty or not positive");
  KILN_CHECK(input_names.size() == inputs.size() && output_names.size() == outputs.size(), "engine '", name,
             "': signature names do not match the inputs/outputs");
  for (size_t i = 0; i < values.size(); ++i) {
    const EngineValue& v = values[i];
    std::string where = "value #" + std::to_string(i) + " '" + v.name + "'";
    for (const ir::Dim& d : v.shape)
      KILN_CHECK(d.is_symbolic() ? d.symbol == batch.symbol && d.scale >= 1 : d.size >= 0, "engine '", name, "': ",
                 where, " has dim ", ir::dim_str(d), " (only static sizes and multiples of the batch symbol are allowed)");
    switch (v.kind) {
      case EngineValue::Kind::input:
        KILN_CHECK(v.index >= 0 && v.index < static_cast<int64_t>(inputs.size()) &&
                       inputs[static_cast<size_t>(v.index)] == static_cast<int32_t>(i),
                   "engine '", name, "': ", where, " claims to be input ", v.index, " of the signature but is not");
        break;
      case EngineValue::Kind::constant: {
        KILN_CHECK(v.index >= 0 && v.index < static_cast<int64_t>(constants.size()), "engine '", name, "': ", where,
                   " refers to constant ", v.index, " of ", constants.size());
        const Tensor& c = constants[static_cast<size_t>(v.index)];
        KILN_CHECK(c.defined() && c.dtype() == v.dtype && ir::static_shape(c.shape()) == v.shape, "engine '", name,
                   "': ", where, " does not match its constant's type");
        break;
      }
      case EngineValue::Kind::arena: {
        int64_t max_bytes = static_cast<int64_t>(dtype_size(v.dtype));
        for (const ir::Dim& d : v.shape)
          KILN_CHECK(d.is_symbolic() ? mul_fits(max_bytes, d.scale) && mul_fits(max_bytes, batch.max)
                                     : mul_fits(max_bytes, d.size), "engine '",
                     name, "': ", where, " of type ", ir::type_str(ir::ValueType{v.dtype, v.shape}),
                     " at batch ", batch.max, " overflows 64-bit sizes");
        // Note [Arena slots scale with the batch]: the slot at the largest batch.
        const int64_t scale = arena_scale(batch.max);
        int64_t at = v.offset, bytes = v.bytes;
        const bool fits = at >= 0 && bytes >= 0 && mul_fits(at, scale) && mul_fits(bytes, scale);
        KILN_CHECK(fits && v.offset % 64 == 0 && bytes >= max_bytes && at <= memory.arena_bytes &&
                       bytes <= memory.arena_bytes - at,
                   "engine '", name, "': ", where, " has arena slot [", v.offset, ", +", v.bytes, ")",
                   scale > 1 ? " per unit of batch" : "", " that does not hold its ", max_bytes, " bytes",
                   scale > 1 ? " at batch " + std::to_string(scale) : std::string(), " inside the ",
                   memory.arena_bytes, "-byte arena");
        break;
      }
      case EngineValue::Kind::view: break;
    }
  }
  std::vector<bool> defined(values.size(), false);
  for (size_t i = 0; i < values.size(); ++i)
    defined[i] = values[i].kind == EngineValue::Kind::input || values[i].kind == EngineValue::Kind::constant;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_id(inputs[i], false, "input " + std::to_string(i));
    KILN_CHECK(values[static_cast<size_t>(inputs[i])].kind == EngineValue::Kind::input, "engine '", name, "': input ",
               i, " is not an input value");
  }
  for (size_t s = 0; s < steps.size(); ++s) {
    const EngineStep& st = steps[s];
    std::string where = "step #" + std::to_string(s) + " '" + st.name + "'";
    KILN_CHECK(st.op != nullptr, "engine '", name, "': ", where, " has no op");
    for (const std::string* t : {&st.tactic, &st.small_tactic}) {
      if (t->empty()) continue;
      bool known = false;
      for (const KernelEntry& k : st.op->kernels()) known = known || (k.device == DeviceType::cpu && k.tactic == *t);
      std::string have;
      for (const KernelEntry& k : st.op->kernels())
        if (k.device == DeviceType::cpu) have += (have.empty() ? "" : ", ") + k.tactic;
      KILN_CHECK(known, "engine '", name, "': ", where, " (", st.op->name(), ") uses tactic '", *t,
                 "' which this kiln does not have (its CPU tactics: ", have.empty() ? "none" : have,
                 "); recompile the model");
    }
    // Note [Tactics per batch bucket]: the small batches' tactic covers a proper prefix of the range.
    if (!st.small_tactic.empty())
      KILN_CHECK(!batch.symbol.empty() && st.small_batch_max >= batch.min && st.small_batch_max < batch.max,
                 "engine '", name, "': ", where, " runs tactic '", st.small_tactic, "' up to batch ",
                 st.small_batch_max, ", which is not inside the engine's batch range ",
                 batch.symbol.empty() ? std::string("(it has no batch symbol)")
                                      : "[" + std::to_string(batch.min) + ", " + std::to_string(batch.max) + ")",
                 "; recompile the model");
    for (int32_t id : st.inputs) {
      check_id(id, true, where);
      KILN_CHECK(id < 0 || defined[static_cast<size_t>(id)], "engine '", name, "': ", where, " reads %",
                 values[static_cast<size_t>(id)].name, " before any step writes it");
    }
    for (int32_t id : st.outputs) {
      check_id(id, false, where);
      const EngineValue& v = values[static_cast<size_t>(id)];
      KILN_CHECK(!defined[static_cast<size_t>(id)], "engine '", name, "': ", where, " writes %", v.name,
                 " which is already defined");
      KILN_CHECK(v.kind == (st.op->is_view() ? EngineValue::Kind::view : EngineValue::Kind::arena), "engine '", name,
                 "': ", where, " (", st.op->name(), ") writes %", v.name, " of kind ", value_kind_name(v.kind));
      defined[static_cast<size_t>(id)] = true;
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_id(outputs[i], false, "output " + std::to_string(i));
    KILN_CHECK(defined[static_cast<size_t>(outputs[i])], "engine '", name, "': output ", i, " is never computed");
  }
}

CompileResult compile(const ir::Graph& source, const CompileOptions& options) {
  CompileResult result;
  ir::verify(source);
  ir::Graph g = source.clone();
  result.passes = compiler::optimize(g, options.passes);
  Engine& e = result.engine;
  e.target = options.target ? *options.target : Target::host();
  if (options.threads > 0) e.target.threads = options.threads;
  KILN_CHECK(e.target.threads >= 1, "compile graph '", g.name, "': target threads must be >= 1, got ",
             e.target.threads);
  e.target.runs_here();
  {
    // Note [Layout choice] (include/kiln/runtime.h): after the fusions, so the convolutions carry
    // their epilogues; CSE and DCE then tidy what the rewrite left.
    using Layout = CompileOptions::Layout;
    const bool block = options.passes.opt_level >= 2 && (options.layout == Layout::nchwc ||
                                                         (options.layout == Layout::automatic && e.target.isa == "avx512"));
    if (block) {
      std::vector<std::string> names{options.layout == Layout::nchwc ? "layout_all" : "layout", "cse", "dce"};
      std::erase_if(names, [&](const std::string& n) { return options.passes.disabled.count(n) != 0; });
      for (auto& r : compiler::run_passes(g, names, options.passes.verify_each)) result.passes.push_back(std::move(r));
    }
  }
  ir::verify(g);
  e.name = g.name;
  e.kiln_version = kVersion;
  e.batch.symbol = find_batch_symbol(g);
  if (e.batch.symbol.empty()) {
    KILN_CHECK(options.batch_min == 0 && options.batch_max == 0, "compile graph '", g.name,
               "': a batch range was given but the graph has only static shapes (export it with a symbolic batch dim)");
  } else {
    e.batch.min = options.batch_min > 0 ? options.batch_min : 1;
    e.batch.max = options.batch_max > 0 ? options.batch_max : e.batch.min;
    KILN_CHECK(e.batch.min <= e.batch.max, "compile graph '", g.name, "': batch range ", e.batch.min, ":",
               e.batch.max, " is empty");
  }
  // Note [Arena slots scale with the batch]
  // Every dim is static or a multiple of the batch, so every intermediate's size is at most linear
  // in the batch. The arena is planned at batch 1 and a slot at batch b is b times its batch-1 slot:
  // scaling keeps disjoint slots disjoint and 64-byte offsets aligned, a batch-sized tensor fills
  // its scaled slot exactly and a static-sized one fits in it (b >= 1). The arena is allocated at
  // the largest batch, as before, but a small batch's tensors now lie together at the bottom of it
  // instead of each at the start of its largest-batch slot, spread over the whole arena: the
  // MobileNetV2 engine for batches 1..8 spread batch 1's 5.9 MB over 46 MB, and ran batch 1 at
  // 13.2-15.1 ms against 9.4-10.9 for the same model compiled for batch 1 alone (2 threads, Zen 3,
  // alternating; bench/RESULTS.md).
  std::map<std::string, int64_t> symbol_one;
  if (!e.batch.symbol.empty()) symbol_one[e.batch.symbol] = 1;
  compiler::GraphMemoryPlan plan = compiler::plan_memory(g, symbol_one);
  const int64_t scale = e.arena_scale(e.batch.max);
  int64_t arena_bytes = plan.arena_bytes, sum_bytes = plan.sum_bytes, lower_bound = plan.lower_bound;
  KILN_CHECK(mul_fits(arena_bytes, scale) && mul_fits(sum_bytes, scale) && mul_fits(lower_bound, scale),
             "compile graph '", g.name, "': the arena at batch ", scale, " overflows 64-bit sizes");
  e.memory = MemoryStats{arena_bytes, sum_bytes, lower_bound, static_cast<int64_t>(plan.buffers.size()),
                         plan.inplace_count, plan.view_count};
  result.memory_summary = e.memory.summary();
  int64_t weight_bytes = 0;
  for (const ir::Value* c : g.constants())
    weight_bytes += c->constant().numel() * static_cast<int64_t>(dtype_size(c->constant().dtype()));
  check_memory_budget(g.name, e.target, e.batch, e.memory.arena_bytes, weight_bytes, 0);

  std::map<const ir::Value*, int32_t> ids;
  auto add_value = [&](const ir::Value* v, EngineValue ev) {
    ev.name = v->name();
    ev.dtype = v->type().dtype;
    ev.shape = v->type().shape;
    ids[v] = static_cast<int32_t>(e.values.size());
    e.values.push_back(std::move(ev));
  };
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    add_value(g.inputs()[i], EngineValue{{}, EngineValue::Kind::input, {}, {}, static_cast<int64_t>(i), 0, 0});
    e.inputs.push_back(ids[g.inputs()[i]]);
  }
  for (const ir::Value* c : g.constants()) {
    add_value(c, EngineValue{{}, EngineValue::Kind::constant, {}, {}, static_cast<int64_t>(e.constants.size()), 0, 0});
    e.constants.push_back(c->constant().contiguous());
  }
  for (const ir::Node* n : g.nodes()) {
    EngineStep st;
    st.name = n->outputs().empty() ? n->op().name() : n->outputs()[0]->name();
    st.op = &n->op();
    st.attrs = n->attrs();
    for (const ir::Value* v : n->inputs()) st.inputs.push_back(v ? ids.at(v) : -1);
    for (const ir::Value* o : n->outputs()) {
      const compiler::ValuePlacement& p = plan.values.at(o);
      if (p.kind == compiler::ValuePlacement::Kind::view)
        add_value(o, EngineValue{{}, EngineValue::Kind::view, {}, {}, 0, 0, 0});
      else
        add_value(o, EngineValue{{}, EngineValue::Kind::arena, {}, {}, 0, p.offset, p.bytes});
      st.outputs.push_back(ids[o]);
    }
    e.steps.push_back(std::move(st));
  }
  for (const ir::Value* v : g.outputs()) e.outputs.push_back(ids.at(v));
  e.input_names = options.input_names;
  e.output_names = options.output_names;
  if (e.input_names.empty())
    for (const ir::Value* v : g.inputs()) e.input_names.push_back(v->name());
  if (e.output_names.empty())
    for (const ir::Value* v : g.outputs()) e.output_names.push_back(v->name());
  KILN_CHECK(e.input_names.size() == e.inputs.size() && e.output_names.size() == e.outputs.size(),
             "compile graph '", g.name, "': ", e.input_names.size(), " input names for ", e.inputs.size(),
             " inputs or ", e.output_names.size(), " output names for ", e.outputs.size(), " outputs");
  result.tuning = select_tactics(e, options);
  e.validate();
  return result;
}

}  // namespace kiln::runtime
