// The executor: one arena per instance, every step's kernel into arena views (Note [Resolved steps]).
#include <algorithm>
#include <chrono>
#include <cstring>

#include "kiln/ops/dispatch.h"
#include "kiln/runtime.h"
#include "ops/tactics.h"

namespace kiln::runtime {

Executor::Executor(std::shared_ptr<const Engine> engine) : engine_(std::move(engine)) {
  KILN_CHECK(engine_ != nullptr, "Executor: no engine");
  // Note [One arena]: the slots at any batch of the range lie inside the arena sized for the
  // largest (Note [Arena slots scale with the batch]); one allocation serves every run.
  arena_ = std::make_shared<StorageImpl>(static_cast<size_t>(std::max<int64_t>(engine_->memory.arena_bytes, 64)),
                                         Device::cpu());
  env_.resize(engine_->values.size());
  for (size_t i = 0; i < engine_->values.size(); ++i) {
    const EngineValue& v = engine_->values[i];
    if (v.kind == EngineValue::Kind::constant) env_[i] = engine_->constants[static_cast<size_t>(v.index)];
  }
  // Note [Prepacked tactics] (src/ops/defs/linalg/matmul_tactics.cc): constant weights of
  // "prepacked" and "direct" steps are packed here, once per loaded engine, not on the first run.
  // A step with a tactic per batch bucket keeps both packed forms.
  for (const EngineStep& st : engine_->steps)
    for (const std::string* t : {&st.tactic, &st.small_tactic})
      if (tactic_packs_weight(*t) && st.inputs.size() > 1 && st.inputs[1] >= 0 &&
          engine_->values[static_cast<size_t>(st.inputs[1])].kind == EngineValue::Kind::constant)
        prepack_weight(*st.op, *t, env_[static_cast<size_t>(st.inputs[1])], st.attrs);
  reset_profile();
}

double LayerTime::median_ms() const {
  if (run_ms.empty()) return 0;
  std::vector<double> sorted = run_ms;
  const auto mid = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
  std::nth_element(sorted.begin(), mid, sorted.end());
  return *mid;
}

void Executor::reset_profile() {
  profile_.clear();
  for (const EngineStep& st : engine_->steps) profile_.push_back(LayerTime{st.name, st.op->name(), st.tactic, 0, 0, {}});
}

std::vector<Tensor> Executor::run(const std::map<std::string, Tensor>& inputs) {
  const Engine& e = *engine_;
  std::vector<Tensor> ordered(e.inputs.size());
  for (const auto& [name, t] : inputs) {
    bool found = false;
    for (size_t i = 0; i < e.inputs.size() && !found; ++i)
      if (e.input_names[i] == name || e.values[static_cast<size_t>(e.inputs[i])].name == name) {
        ordered[i] = t;
        found = true;
      }
    if (!found) {
      std::string names;
      for (const auto& n : e.input_names) names += (names.empty() ? "" : ", ") + n;
      KILN_FAIL("engine '", e.name, "': no input named '", name, "' (its inputs: ", names.empty() ? "none" : names, ")");
    }
  }
  for (size_t i = 0; i < ordered.size(); ++i)
    KILN_CHECK(ordered[i].defined(), "engine '", e.name, "': input '", e.input_names[i], "' was not given");
  return run(ordered);
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  const Engine& e = *engine_;
  KILN_CHECK(inputs.size() == e.inputs.size(), "engine '", e.name, "': expected ", e.inputs.size(), " inputs, got ",
             inputs.size());
  int64_t batch = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const EngineValue& v = e.values[static_cast<size_t>(e.inputs[i])];
    std::string what = "engine '" + e.name + "': input '" + e.input_names[i] + "' (" +
                       ir::type_str(ir::ValueType{v.dtype, v.shape}) + ")";
    KILN_CHECK(t.defined(), what, " is an undefined tensor");
    KILN_CHECK(t.device().type == DeviceType::cpu, what, " is on ", t.device().str(), "; this engine runs on the CPU");
    KILN_CHECK(t.dtype() == v.dtype, what, ": got dtype ", dtype_name(t.dtype()));
    KILN_CHECK(t.dim() == static_cast<int64_t>(v.shape.size()), what, ": got shape ", shape_str(t.shape()));
    for (size_t d = 0; d < v.shape.size(); ++d) {
      int64_t got = t.shape()[d];
      if (!v.shape[d].is_symbolic()) {
        KILN_CHECK(got == v.shape[d].size, what, ": dim ", d, " must be ", v.shape[d].size, ", got shape ",
                   shape_str(t.shape()));
        continue;
      }
      KILN_CHECK(got % v.shape[d].scale == 0, what, ": dim ", d, " is ", ir::dim_str(v.shape[d]), ", got shape ",
                 shape_str(t.shape()));
      got /= v.shape[d].scale;
      KILN_CHECK(got >= e.batch.min && got <= e.batch.max, what, ": batch ", got, " (dim ", d,
                 ") is outside the compiled range [", e.batch.min, ", ", e.batch.max,
                 "]; recompile with kiln compile --batch MIN:MAX");
      KILN_CHECK(batch < 0 || batch == got, what, ": batch ", got, " differs from ", batch, " given by an earlier input");
      batch = got;
    }
    env_[static_cast<size_t>(e.inputs[i])] = t;
  }

  // Note [Arena slots scale with the batch]; an engine whose inputs carry no batch runs its slots
  // at the largest batch (what validate() checked).
  const int64_t scale = e.arena_scale(batch > 0 ? batch : e.batch.max);
  // Note [Resolved steps]
  // At a batch it has not run before, each step's call is resolved (resolve_call: devices, output
  // metadata checked against the step's arena slot, the tactic's kernel) and its output views are
  // made; every later run at that batch only runs the kernels into them (Note [Resolved calls] in
  // src/ops/dispatch.cc). Views and steps whose op casts its inputs still go through run_kernel.
  // 100 one-vector steps (relu, neg on 16 floats): 0.059 -> 0.023 ms a run; MobileNetV3-Small at
  // batch 1, one thread, min of 300 runs in 3 alternations: 1.97-2.30 -> 1.85-1.88 ms.
  std::vector<ResolvedStep>& resolved = resolved_[batch];
  if (resolved.empty()) resolved.resize(e.steps.size());
  using Clock = std::chrono::steady_clock;
  std::vector<Tensor> ins, outs;
  for (size_t s = 0; s < e.steps.size(); ++s) {
    const EngineStep& st = e.steps[s];
    Clock::time_point t0;
    if (profiling_) t0 = Clock::now();
    ins.clear();
    for (int32_t id : st.inputs) ins.push_back(id < 0 ? Tensor() : env_[static_cast<size_t>(id)]);
    try {
      if (st.op->is_view()) {
        outs = run_kernel(OpCall{*st.op, ins, st.attrs, KILN_HERE, Tensor(), nullptr});
      } else {
        ResolvedStep& rs = resolved[s];
        if (!rs.ready) {
          ResolvedCall call = resolve_call(*st.op, ins, st.attrs, st.tactic_at(batch));
          const std::vector<TensorMeta>& metas = call.outputs;
          std::vector<Tensor> views;
          KILN_CHECK(metas.size() == st.outputs.size(), "produces ", metas.size(), " outputs, the engine has ",
                     st.outputs.size());
          for (size_t k = 0; k < metas.size(); ++k) {
            const EngineValue& v = e.values[static_cast<size_t>(st.outputs[k])];
            int64_t nbytes = static_cast<int64_t>(dtype_size(metas[k].dtype));
            for (int64_t d : metas[k].shape) nbytes *= d;
            KILN_CHECK(metas[k].dtype == v.dtype && nbytes <= v.bytes * scale, "output %", v.name, " is ",
                       meta_str(metas[k]), " but the engine reserved ", v.bytes * scale, " bytes of ",
                       dtype_name(v.dtype));
            views.push_back(make_tensor(arena_, v.offset * scale / static_cast<int64_t>(dtype_size(v.dtype)),
                                        metas[k].shape, contiguous_strides(metas[k].shape), v.dtype));
          }
          rs = ResolvedStep{true, std::move(call), std::move(views)};
        }
        outs.assign(rs.outputs.begin(), rs.outputs.end());
        if (rs.call.kernel != nullptr) run_resolved(rs.call, *st.op, ins, st.attrs, outs);
        else outs = run_kernel(OpCall{*st.op, ins, st.attrs, KILN_HERE, Tensor(), nullptr}, outs, st.tactic_at(batch));
        for (size_t k = 0; k < outs.size(); ++k) {
          // A kernel that allocated anyway: its result into the arena view.
          if (outs[k].data_ptr() != rs.outputs[k].data_ptr()) rs.outputs[k].copy_(outs[k]);
          outs[k] = rs.outputs[k];
        }
      }
    } catch (const Error& err) {
      KILN_FAIL("engine '", e.name, "': step #", s, " '", st.name, "' (", st.op->name(), ") failed: ", err.what());
    }
    KILN_CHECK(outs.size() == st.outputs.size(), "engine '", e.name, "': step #", s, " '", st.name, "' produced ",
               outs.size(), " outputs, the engine has ", st.outputs.size());
    for (size_t k = 0; k < outs.size(); ++k) env_[static_cast<size_t>(st.outputs[k])] = std::move(outs[k]);
    if (profiling_) {
      const double step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      profile_[s].ms += step_ms;
      profile_[s].run_ms.push_back(step_ms);
      profile_[s].tactic = st.tactic_at(batch);
      ++profile_[s].runs;
    }
  }
  std::vector<Tensor> result;
  for (int32_t id : e.outputs) {
    const EngineValue& v = e.values[static_cast<size_t>(id)];
    // Outputs must outlive the next run (which reuses the arena) and must not expose constants.
    result.push_back(v.kind == EngineValue::Kind::input ? env_[static_cast<size_t>(id)]
                                                        : env_[static_cast<size_t>(id)].clone());
  }
  for (size_t i = 0; i < e.values.size(); ++i)
    if (e.values[i].kind != EngineValue::Kind::constant) env_[i] = Tensor();
  return result;
}

}  // namespace kiln::runtime
