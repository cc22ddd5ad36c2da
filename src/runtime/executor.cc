// The executor: one arena per instance, every step's kernel into arena views (Note [Resolved steps]).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/core/thread_pool.h"
#include "kiln/ops/dispatch.h"
#include "kiln/runtime.h"
#include "ops/tactics.h"
#include "runtime/tactics.h"

namespace kiln::runtime {

namespace {

// Whether v's dim 0 is the batch itself (not a multiple of it) and its other dims are static: a
// value a depth-first group cuts into images.
bool image_rows(const EngineValue& v) {
  if (v.shape.empty() || !v.shape[0].is_symbolic() || v.shape[0].scale != 1) return false;
  return std::none_of(v.shape.begin() + 1, v.shape.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
}

bool has_batch(const EngineValue& v) {
  return std::any_of(v.shape.begin(), v.shape.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
}

// Bytes of v at batch 1.
int64_t bytes_at_one(const EngineValue& v) {
  int64_t n = static_cast<int64_t>(dtype_size(v.dtype));
  for (const ir::Dim& d : v.shape) n *= d.is_symbolic() ? d.scale : d.size;
  return n;
}

// Note [Depth-first groups]: filters up to this size are read again for every image (from L2 or
// L3) whatever the image's own bytes.
constexpr int64_t kSmallFilterBytes = 256 << 10;

constexpr int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

}  // namespace

bool image_by_image(const Engine& e, const EngineStep& st) {
  if (e.batch.symbol.empty() || !st.op->is_per_sample() || st.op->is_view() || st.outputs.empty()) return false;
  auto value = [&](int32_t id) -> const EngineValue& { return e.values[static_cast<size_t>(id)]; };
  int64_t filters = 0, image = 0;
  for (int32_t id : st.outputs) {
    const EngineValue& v = value(id);
    if (v.kind != EngineValue::Kind::arena || !image_rows(v)) return false;
    image += bytes_at_one(v);
  }
  bool cut = false;
  for (int32_t id : st.inputs) {
    if (id < 0) continue;
    const EngineValue& v = value(id);
    if (!has_batch(v)) {
      if (v.kind == EngineValue::Kind::constant) filters += bytes_at_one(v);
      continue;
    }
    // (An input that broadcasts with its batch dim against another dim of the output gives an
    // output with the batch inside: not one image_rows takes.)
    if (!image_rows(v) || v.kind == EngineValue::Kind::view) return false;
    image += bytes_at_one(v);
    cut = true;
  }
  return cut && (filters <= image || filters <= kSmallFilterBytes);
}

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
  if (const char* env = std::getenv("KILN_DEPTH_FIRST"); env != nullptr && std::string(env) == "0") depth_first_ = false;
  if (engine_->target.memory_budget > 0) {
    spare_bytes_ = engine_->target.memory_budget - engine_->memory.arena_bytes;
    for (const Tensor& c : engine_->constants) spare_bytes_ -= c.numel() * static_cast<int64_t>(dtype_size(c.dtype()));
  }
  find_groups();
}

// Note [Depth-first groups]
// At batch 8 a MobileNet's early layers move more bytes than any cache holds: MobileNetV2's 16 ->
// 96 1x1 layer at 112 x 112 writes 38.5 MB, which the depthwise layer after it reads back from
// memory, and on one thread the model took 7-9% more time an image than at batch 1 (Zen 4). Run
// image by image instead, a layer's output is still in L2 or L3 when the next layer reads it. So
// a run of per-sample steps (OpDef::per_sample: convolutions, pooling, elementwise) goes image by
// image, each thread taking whole images and running every step of the run on them alone, its
// kernels inline: no split of a layer between the threads, no wait at the end of each layer,
// and each image's tensors stay in the cache of the core that made them. The group's
// intermediates (values made and used up inside it) live in a sub-arena per thread holding one
// image's worth, planned here as the compiler plans the arena; what comes in from before the group
// and what it leaves for after are slices of the engine's own arena values.
//
// A step joins a group where its filters are small beside one image's inputs and outputs (or under
// kSmallFilterBytes): a late 1x1 layer's filters (MobileNetV2's 960 -> 320 at 7 x 7, 1.2 MB) read
// for every image would cost more than the batch's shared read of them saves. Where the batch
// does not divide among the threads, the images left over run one at a time through the group
// with its kernels split between the threads, as at batch 1. Against batched runs of the same
// engine at batch 8 on two threads, alternating in one process (bench/depth_first_ab.cc, Zen 4):
// MobileNetV2 0.84-0.91, MobileNetV3-Small and -Large 0.84-0.85, MobileNetV1 0.92, EfficientNet-B0
// 0.93-0.96, ResNet-18 and -50 0.98; on one thread MobileNetV2 0.88-0.90; batches 2 and 3 even.
// All of MobileNetV2 image by image (no filter rule) was no faster than its first 41 steps.
//
// The arena plan gives a value's slot to a later one once the first is read for the last time;
// image by image, an earlier image's later steps run while a later image has not yet read what
// came in. So the group's inputs and outputs must not share slots, though the plan is free to
// give an input's slot to an output made after the input's last read; a group whose plan does
// that is cut short before the output.
void Executor::find_groups() {
  const Engine& e = *engine_;
  const size_t steps = e.steps.size(), nv = e.values.size();
  group_at_.assign(steps, -1);
  if (e.batch.symbol.empty()) return;
  std::vector<size_t> last(nv, 0);  // the step that reads a value last (its own step if none does)
  std::vector<int64_t> producer(nv, -1);
  for (size_t s = 0; s < steps; ++s) {
    for (int32_t id : e.steps[s].inputs)
      if (id >= 0) last[static_cast<size_t>(id)] = s;
    for (int32_t id : e.steps[s].outputs) {
      producer[static_cast<size_t>(id)] = static_cast<int64_t>(s);
      last[static_cast<size_t>(id)] = s;
    }
  }
  for (int32_t id : e.outputs) last[static_cast<size_t>(id)] = steps;
  auto value = [&](int32_t id) -> const EngineValue& { return e.values[static_cast<size_t>(id)]; };
  auto overlap = [&](const EngineValue& a, const EngineValue& b) {
    return a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  };
  // The group [b, end) if its inputs and outputs keep apart in the arena; else nullopt.
  auto make = [&](size_t b, size_t end) -> std::optional<Group> {
    Group g;
    g.begin = b, g.end = end;
    g.sub_offset.assign(nv, -1);
    std::vector<int32_t> ins, outs;
    for (size_t s = b; s < end; ++s) {
      for (int32_t id : e.steps[s].inputs)
        if (id >= 0 && has_batch(value(id)) && producer[static_cast<size_t>(id)] < static_cast<int64_t>(b) &&
            value(id).kind == EngineValue::Kind::arena)
          ins.push_back(id);
      for (int32_t id : e.steps[s].outputs)
        if (last[static_cast<size_t>(id)] >= end) outs.push_back(id);
    }
    for (int32_t i : ins)
      for (int32_t o : outs)
        if (overlap(value(i), value(o))) return std::nullopt;
    // The intermediates, first fit in order of definition (each live from its step to its last
    // read). An output the arena plan put over an input that dies at its step (Note [Residual in
    // place] in kernels/cpu/conv_nchwc.cc) takes that input's place here too: ResNet-50's 1x1
    // expansions ran 5-18% slower image by image reading the residual and writing the output apart.
    struct Live { int64_t at, bytes; size_t until; int32_t id; };
    std::vector<Live> live;
    for (size_t s = b; s < end; ++s)
      for (int32_t id : e.steps[s].outputs) {
        if (last[static_cast<size_t>(id)] >= end) continue;
        const EngineValue& out = value(id);
        auto over = std::find_if(live.begin(), live.end(), [&](const Live& l) {
          const EngineValue& in = value(l.id);
          return l.until == s && in.offset == out.offset && in.bytes >= out.bytes &&
                 std::find(e.steps[s].inputs.begin(), e.steps[s].inputs.end(), l.id) != e.steps[s].inputs.end();
        });
        if (over != live.end()) {
          over->until = last[static_cast<size_t>(id)];
          over->id = id;
          g.sub_offset[static_cast<size_t>(id)] = over->at;
          continue;
        }
        std::erase_if(live, [&](const Live& l) { return l.until < s; });
        std::sort(live.begin(), live.end(), [](const Live& x, const Live& y) { return x.at < y.at; });
        const int64_t bytes = round_up(std::max<int64_t>(value(id).bytes, 1), 64);
        int64_t at = 0;
        for (const Live& l : live) {
          if (at + bytes <= l.at) break;
          at = std::max(at, l.at + l.bytes);
        }
        live.push_back(Live{at, bytes, last[static_cast<size_t>(id)], id});
        g.sub_offset[static_cast<size_t>(id)] = at;
        g.sub_bytes = std::max(g.sub_bytes, at + bytes);
      }
    return g;
  };
  for (size_t s = 0; s < steps;) {
    size_t end = s;
    while (end < steps && image_by_image(e, e.steps[end])) ++end;
    if (end == s) {
      ++s;
      continue;
    }
    for (; end - s >= 2; --end)
      if (std::optional<Group> g = make(s, end)) {
        group_at_[s] = static_cast<int>(groups_.size());
        groups_.push_back(std::move(*g));
        break;
      }
    s = std::max(end, s + 1);
  }
}

std::vector<std::pair<size_t, size_t>> Executor::depth_first_groups() const {
  std::vector<std::pair<size_t, size_t>> r;
  for (const Group& g : groups_) r.emplace_back(g.begin, g.end);
  return r;
}

bool Executor::run_group(Group& g, int64_t batch, int64_t scale) {
  using Clock = std::chrono::steady_clock;
  const Engine& e = *engine_;
  const int threads = static_cast<int>(std::min<int64_t>(get_num_threads(), batch));
  const int64_t stride = round_up(std::max<int64_t>(g.sub_bytes, 1), 4096);
  if (spare_bytes_ >= 0 && threads * stride > spare_bytes_) return false;  // over the memory budget: batched
  if (sub_arena_ == nullptr || static_cast<int64_t>(sub_arena_->nbytes()) < threads * stride)
    sub_arena_ = std::make_shared<StorageImpl>(static_cast<size_t>(threads * stride), Device::cpu());
  auto in_sub = [&](int32_t id) { return g.sub_offset[static_cast<size_t>(id)] >= 0; };
  auto sub_view = [&](int32_t id, int slot) {
    const TensorMeta& m = g.metas[static_cast<size_t>(id)];
    const int64_t at = slot * stride + g.sub_offset[static_cast<size_t>(id)];
    return make_tensor(sub_arena_, at / static_cast<int64_t>(dtype_size(m.dtype)), m.shape,
                       contiguous_strides(m.shape), m.dtype);
  };
  // The intermediates' views in each sub-arena, made once: a view a step an image cost MobileNetV3-
  // Small ~2000 tensor handles a run at batch 8.
  auto view = [&](int32_t id, int slot) -> const Tensor& {
    return g.views[static_cast<size_t>(slot)][static_cast<size_t>(id)];
  };
  // Step s's tensors for image i in sub-arena `slot`.
  auto tensors = [&](size_t s, int64_t i, int slot, std::vector<Tensor>& ins, std::vector<Tensor>* outs) {
    const EngineStep& st = e.steps[s];
    ins.clear();
    for (int32_t id : st.inputs) {
      if (id < 0) ins.emplace_back();
      else if (in_sub(id)) ins.push_back(g.views_of != nullptr ? view(id, slot) : sub_view(id, slot));
      else if (has_batch(e.values[static_cast<size_t>(id)])) ins.push_back(env_[static_cast<size_t>(id)].slice(0, i, i + 1));
      else ins.push_back(env_[static_cast<size_t>(id)]);
    }
    if (outs == nullptr) return;
    outs->clear();
    for (int32_t id : st.outputs)
      outs->push_back(in_sub(id) ? view(id, slot) : env_[static_cast<size_t>(id)].slice(0, i, i + 1));
  };
  // In order: each step's call at one image (the first time), and its outputs for after the group
  // as views of the arena at this batch.
  const bool first = g.calls.empty();
  if (first) g.metas.resize(e.values.size());
  std::vector<Tensor> ins;
  for (size_t s = g.begin; s < g.end; ++s) {
    const EngineStep& st = e.steps[s];
    if (first) {
      // A call that does not resolve at one image runs batched, where a bad input gets its error.
      ResolvedCall call;
      try {
        tensors(s, 0, 0, ins, nullptr);
        call = resolve_call(*st.op, ins, st.attrs, st.tactic_at(1));
      } catch (const Error&) {
        call.kernel = nullptr;
      }
      bool fits = call.kernel != nullptr && call.outputs.size() == st.outputs.size();
      for (size_t k = 0; fits && k < st.outputs.size(); ++k) {
        const EngineValue& v = e.values[static_cast<size_t>(st.outputs[k])];
        const TensorMeta& m = call.outputs[k];
        int64_t nbytes = static_cast<int64_t>(dtype_size(m.dtype));
        for (int64_t d : m.shape) nbytes *= d;
        fits = m.dtype == v.dtype && !m.shape.empty() && m.shape[0] == 1 && nbytes <= v.bytes;
        g.metas[static_cast<size_t>(st.outputs[k])] = m;
      }
      if (!fits) {
        g.usable = false;
        g.calls.clear();
        return false;
      }
      g.calls.push_back(std::move(call));
    }
    for (int32_t id : st.outputs) {
      if (in_sub(id)) continue;
      const EngineValue& v = e.values[static_cast<size_t>(id)];
      Shape shape = g.metas[static_cast<size_t>(id)].shape;
      shape[0] = batch;
      env_[static_cast<size_t>(id)] = make_tensor(arena_, v.offset * scale / static_cast<int64_t>(dtype_size(v.dtype)),
                                                  shape, contiguous_strides(shape), v.dtype);
    }
  }
  if (g.views_of != sub_arena_.get() || static_cast<int>(g.views.size()) < threads) {
    g.views.assign(static_cast<size_t>(threads), std::vector<Tensor>(e.values.size()));
    for (int slot = 0; slot < threads; ++slot)
      for (size_t id = 0; id < e.values.size(); ++id)
        if (g.sub_offset[id] >= 0) g.views[static_cast<size_t>(slot)][id] = sub_view(static_cast<int32_t>(id), slot);
    g.views_of = sub_arena_.get();
  }
  const size_t n = g.end - g.begin;
  std::vector<double> ms(profiling_ ? static_cast<size_t>(threads + 1) * n : 0);
  auto run_image = [&](int64_t i, int slot, double* times) {
    std::vector<Tensor> in, out;
    for (size_t s = g.begin; s < g.end; ++s) {
      const EngineStep& st = e.steps[s];
      const Clock::time_point t0 = times != nullptr ? Clock::now() : Clock::time_point();
      try {
        tensors(s, i, slot, in, &out);
        run_resolved(g.calls[s - g.begin], *st.op, in, st.attrs, out);
      } catch (const Error& err) {
        KILN_FAIL("engine '", e.name, "': step #", s, " '", st.name, "' (", st.op->name(), ") failed on image ", i,
                  " of ", batch, ": ", err.what());
      }
      if (times != nullptr) times[s - g.begin] += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    }
  };
  // Whole images for every thread; the rest one at a time, each with all the threads.
  const int64_t together = batch / threads * threads;
  std::atomic<int64_t> next{0};
  parallel_run(threads, [&](int t, int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < together;)
      run_image(i, t, profiling_ ? ms.data() + static_cast<size_t>(t) * n : nullptr);
  });
  for (int64_t i = together; i < batch; ++i) run_image(i, 0, profiling_ ? ms.data() + static_cast<size_t>(threads) * n : nullptr);
  if (profiling_)
    for (size_t k = 0; k < n; ++k) {
      double shared = 0;
      for (int t = 0; t < threads; ++t) shared += ms[static_cast<size_t>(t) * n + k];
      const double step_ms = shared / threads + ms[static_cast<size_t>(threads) * n + k];
      LayerTime& lt = profile_[g.begin + k];
      lt.ms += step_ms;
      lt.run_ms.push_back(step_ms);
      lt.tactic = e.steps[g.begin + k].tactic_at(1);
      lt.image_by_image = true;
      ++lt.runs;
    }
  return true;
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
    if (depth_first_ && batch >= 2 && group_at_[s] >= 0) {
      Group& g = groups_[static_cast<size_t>(group_at_[s])];
      if (g.usable && run_group(g, batch, scale)) {
        s = g.end - 1;
        continue;
      }
    }
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
      profile_[s].image_by_image = false;
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
