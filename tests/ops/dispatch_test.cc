// The dispatcher: interceptor order, pass-through and short-circuit; what an interceptor sees in
// an OpCall; attribute binding and schema parsing errors by content; kernel and tactic selection;
// resolved calls (an engine's steps); errors for bad calls.
#include <string>
#include <vector>

#include "ops/defs/common.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;

// Records each call it sees; optionally answers "mul" itself, or rewrites an op's second input.
class RecordingInterceptor : public Interceptor {
 public:
  RecordingInterceptor(std::string tag, std::vector<std::string>& log) : tag_(std::move(tag)), log_(log) {}
  const char* name() const override { return tag_.c_str(); }
  std::vector<Tensor> intercept(OpCall& call, const std::function<std::vector<Tensor>(OpCall&)>& next) override {
    log_.push_back(tag_ + ":" + call.op.name());
    last_attrs = call.attrs;
    last_line = call.loc.line();
    last_inplace = call.inplace_name ? call.inplace_name : "";
    if (short_circuit_mul && call.op.name() == "mul") return {answer};
    if (zero_second_input && call.inputs.size() > 1) call.inputs[1] = zeros_like(call.inputs[1]);
    return next(call);
  }

  bool short_circuit_mul = false;
  bool zero_second_input = false;
  Tensor answer;
  Attrs last_attrs;
  uint_least32_t last_line = 0;
  std::string last_inplace;

 private:
  std::string tag_;
  std::vector<std::string>& log_;
};

// Registers for the scope of a test, so a failing assertion never leaves an interceptor behind.
class ScopedInterceptor {
 public:
  ScopedInterceptor(int order, Interceptor* i) : i_(i) { register_interceptor(order, i); }
  ~ScopedInterceptor() { unregister_interceptor(i_); }
  ScopedInterceptor(const ScopedInterceptor&) = delete;
  ScopedInterceptor& operator=(const ScopedInterceptor&) = delete;

 private:
  Interceptor* i_;
};

TEST(Dispatch, InterceptorsRunInAscendingOrderAndPassThrough) {
  std::vector<std::string> log;
  RecordingInterceptor autograd_like("second", log), tracing_like("first", log);
  Tensor a = testing::random_tensor({3, 4}, DType::f32, 1), b = testing::random_tensor({4}, DType::f32, 2);
  Tensor expected = add(a, b);
  {
    ScopedInterceptor r2(200, &autograd_like);  // registered first, runs second
    ScopedInterceptor r1(100, &tracing_like);
    Tensor c = add(a, b);
    EXPECT_EQ(log, (std::vector<std::string>{"first:add", "second:add"}));
    EXPECT_TRUE(all_close(c, expected, {0, 0}));
  }
  log.clear();
  Tensor d = add(a, b);
  EXPECT_TRUE(log.empty()) << "unregistered interceptors still ran";
  EXPECT_TRUE(all_close(d, expected, {0, 0}));
}

TEST(Dispatch, AnInterceptorCanShortCircuitOrRewriteTheCall) {
  std::vector<std::string> log;
  RecordingInterceptor first("first", log), second("second", log);
  first.short_circuit_mul = true;
  first.answer = full({2, 2}, 42.0);
  Tensor x = testing::random_tensor({2, 2}, DType::f32, 3);
  ScopedInterceptor r1(100, &first), r2(200, &second);
  Tensor y = mul(x, x);
  EXPECT_TRUE(y.is_same(first.answer));
  EXPECT_EQ(log, (std::vector<std::string>{"first:mul"})) << "the later interceptor and the kernel must not run";

  log.clear();
  second.zero_second_input = true;
  Tensor z = add(x, x);  // second replaces the right operand by zeros before the kernel
  EXPECT_EQ(log, (std::vector<std::string>{"first:add", "second:add"}));
  EXPECT_TRUE(all_close(z, x, {0, 0}));
}

TEST(Dispatch, InterceptorsSeeBoundAttributesCallSiteAndInPlaceCalls) {
  std::vector<std::string> log;
  RecordingInterceptor rec("rec", log);
  ScopedInterceptor r(100, &rec);
  Tensor a = testing::random_tensor({5}, DType::f32, 4), b = testing::random_tensor({5}, DType::f32, 5);
  const auto line = __LINE__ + 1;
  (void)mod(a, b);
  EXPECT_EQ(rec.last_line, line);
  ASSERT_TRUE(rec.last_attrs.has("fmod")) << "defaults are bound before interceptors run";
  EXPECT_FALSE(rec.last_attrs.get_bool("fmod"));
  EXPECT_EQ(rec.last_inplace, "");

  Tensor c = a.clone();
  uint64_t v = c.version();
  c.add_(b);
  EXPECT_EQ(rec.last_inplace, "add_");
  EXPECT_EQ(c.version(), v + 1);
  EXPECT_TRUE(all_close(c, add(a, b), {0, 0}));
}

// ---- attribute binding -------------------------------------------------------------------------------

OpDef test_op() {
  return OpDef("scale(Tensor x, Tensor? bias, float alpha=2.0, int[] dims=[1, 2], int k, str mode=\"fast\", "
               "bool flag=true, float? limit, dtype out=f64, float[] ws=[0.5]) -> Tensor");
}

TEST(Dispatch, AttributeBindingFillsDefaultsAndConverts) {
  OpDef d = test_op();
  Attrs bound = d.bind_attrs({{"k", int64_t{3}}, {"alpha", int64_t{5}}, {"ws", std::vector<int64_t>{1, 2}}});
  EXPECT_EQ(bound.get_int("k"), 3);
  EXPECT_EQ(bound.get_float("alpha"), 5.0);  // an int is accepted for a float
  EXPECT_EQ(bound.get_floats("ws"), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(bound.get_ints("dims"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(bound.get_string("mode"), "fast");
  EXPECT_TRUE(bound.get_bool("flag"));
  EXPECT_EQ(bound.get_dtype("out"), DType::f64);
  EXPECT_FALSE(bound.has("limit"));  // nullable without default: stays absent
}

TEST(Dispatch, AttributeBindingErrorsNameTheOpAndTheAttribute) {
  OpDef d = test_op();
  EXPECT_KILN_ERROR(d.bind_attrs({{"k", int64_t{1}}, {"alpah", 1.0}}), "scale", "unknown attribute 'alpah'",
                    "the op takes: alpha, dims, k, mode, flag, limit, out, ws");
  EXPECT_KILN_ERROR(d.bind_attrs({{"k", 1.5}}), "scale", "attribute 'k' expects int, got float");
  EXPECT_KILN_ERROR(d.bind_attrs({{"k", int64_t{1}}, {"flag", std::string("yes")}}), "scale",
                    "attribute 'flag' expects bool, got str");
  EXPECT_KILN_ERROR(d.bind_attrs({{"k", int64_t{1}}, {"dims", 2.0}}), "attribute 'dims' expects int[]");
  EXPECT_KILN_ERROR(d.bind_attrs({}), "scale", "required attribute 'k' (int) is missing");
  // Through the dispatcher, on a registered op.
  Tensor a = ones({2}), b = ones({2});
  EXPECT_KILN_ERROR(dispatch(op("mod"), {a, b}, {{"fmodd", true}}), "mod", "unknown attribute 'fmodd'",
                    "the op takes: fmod");
  EXPECT_KILN_ERROR(dispatch(op("add"), {a, b}, {{"alpha", 1.0}}), "add", "unknown attribute 'alpha'",
                    "no attributes");
  EXPECT_KILN_ERROR(dispatch(op("mod"), {a, b}, {{"fmod", int64_t{1}}}), "mod", "'fmod' expects bool, got int");
}

// ---- schema parsing -------------------------------------------------------------------------------------

TEST(Dispatch, SchemaParsing) {
  Schema s = Schema::parse("topk(Tensor x, int k, int axis=-1, bool largest=true) -> (Tensor values, Tensor indices)");
  EXPECT_EQ(s.name, "topk");
  ASSERT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(s.inputs[0].name, "x");
  ASSERT_EQ(s.attrs.size(), 3u);
  EXPECT_EQ(s.attrs[0].name, "k");
  EXPECT_FALSE(s.attrs[0].default_value.has_value());
  EXPECT_EQ(std::get<int64_t>(*s.attrs[1].default_value), -1);
  EXPECT_EQ(std::get<bool>(*s.attrs[2].default_value), true);
  EXPECT_EQ(s.outputs, (std::vector<std::string>{"values", "indices"}));
  EXPECT_FALSE(s.variadic_outputs);

  Schema c = Schema::parse("concat(Tensor[] xs, int axis) -> Tensor");
  EXPECT_TRUE(c.inputs[0].variadic);
  EXPECT_EQ(c.outputs, (std::vector<std::string>{"out"}));
  Schema sp = Schema::parse("split(Tensor x, int[] sizes, int axis=0) -> Tensor[]");
  EXPECT_TRUE(sp.variadic_outputs);
  EXPECT_EQ(sp.attrs[0].type, AttrType::ints);
  Schema cv = Schema::parse("conv2d(Tensor x, Tensor w, Tensor? bias, int[] stride=[1,1], float? eps) -> Tensor");
  EXPECT_TRUE(cv.inputs[2].optional);
  EXPECT_EQ(std::get<std::vector<int64_t>>(*cv.attrs[0].default_value), (std::vector<int64_t>{1, 1}));
  EXPECT_TRUE(cv.attrs[1].nullable);
  EXPECT_NE(cv.find_attr("stride"), nullptr);
  EXPECT_EQ(cv.find_attr("padding"), nullptr);

  auto bad = [](const std::string& text, const std::string& part) {
    try {
      Schema::parse(text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad op schema"), std::string::npos) << e.what();
    }
  };
  bad("f(Tensor x) Tensor", "expected '->'");
  bad("f(Tensor x, complex z) -> Tensor", "unknown argument type 'complex'");
  bad("f(int k, Tensor x) -> Tensor", "tensor argument 'x' after attributes");
  bad("f(Tensor x, bool b=maybe) -> Tensor", "bad bool default 'maybe'");
  bad("f(Tensor x) -> Tensor y z", "trailing text");
  bad("f(Tensor x, str[] names) -> Tensor", "only int[] and float[]");
}

// ---- kernel selection and bad calls ------------------------------------------------------------------------

OpDef scale_op() {
  OpDef d("scale(Tensor x, float alpha=2.0) -> Tensor");
  auto scale_by = [](double sign) {
    return [sign](const KernelCall& k) {
      const float* x = k.in(0).contiguous().data<float>();
      float* y = k.out(0).data<float>();
      float alpha = static_cast<float>(sign * k.attrs.get_float("alpha"));
      for (int64_t i = 0; i < k.out(0).numel(); ++i) y[i] = x[i] * alpha;
    };
  };
  d.infer(defs::infer_same)
      .kernel(DeviceType::cpu, {DType::f32}, scale_by(1.0))
      .kernel(DeviceType::cpu, {DType::f32}, scale_by(-1.0), "negated");
  return d;
}

TEST(Dispatch, KernelsAreChosenByDeviceDTypeAndTactic) {
  OpDef d = scale_op();
  Tensor x = testing::random_tensor({7}, DType::f32, 9);
  OpCall call{d, {x}, d.bind_attrs({{"alpha", 3.0}}), KILN_HERE, Tensor(), nullptr};
  EXPECT_TRUE(all_close(run_kernel(call)[0], x * 3.0, {0, 0}));
  EXPECT_TRUE(all_close(run_kernel(call, {}, "negated")[0], x * -3.0, {0, 0}));
  // Caller-provided outputs (an arena slot) are written in place.
  Tensor slot = empty({7});
  auto outs = run_kernel(call, {slot});
  EXPECT_TRUE(outs[0].is_same(slot));
  EXPECT_TRUE(all_close(slot, x * 3.0, {0, 0}));
  EXPECT_KILN_ERROR(run_kernel(call, {}, "blocked"), "scale", "no kernel for dtype f32 on cpu", "tactic 'blocked'");
  OpCall f64_call{d, {x.to(DType::f64)}, d.bind_attrs({}), KILN_HERE, Tensor(), nullptr};
  EXPECT_KILN_ERROR(run_kernel(f64_call), "scale", "no kernel for dtype f64", "supported dtypes: {f32}");
  EXPECT_EQ(d.find_kernel(DeviceType::cpu, DType::f32)->tactic, "default");
  EXPECT_EQ(d.find_kernel(DeviceType::cpu, DType::f32, "negated")->tactic, "negated");
  EXPECT_EQ(d.find_kernel(DeviceType::cuda, DType::f32), nullptr);
}

// Note [Prepared kernels]: a kernel's prepare function runs once, when the call is resolved, with
// its inputs, attributes and output metadata; what it returns reaches the kernel on every resolved
// run, and an eager call runs the kernel without it.
TEST(Dispatch, PreparedStateReachesEveryResolvedRun) {
  OpDef d("scale(Tensor x, float alpha=2.0) -> Tensor");
  int prepared = 0;
  std::vector<const void*> seen;
  d.infer(defs::infer_same)
      .kernel(
          DeviceType::cpu, {DType::f32},
          [&](const KernelCall& k) {
            seen.push_back(k.prepared);
            // The prepared factor, or the attribute read again.
            const float alpha = k.prepared != nullptr ? *static_cast<const float*>(k.prepared)
                                                      : static_cast<float>(k.attrs.get_float("alpha"));
            const float* x = k.in(0).contiguous().data<float>();
            float* y = k.out(0).data<float>();
            for (int64_t i = 0; i < k.out(0).numel(); ++i) y[i] = x[i] * alpha;
          },
          "default",
          [&](std::span<const Tensor> in, const Attrs& attrs, std::span<const TensorMeta> out) {
            ++prepared;
            EXPECT_EQ(in.size(), 1u);
            EXPECT_EQ(out.size(), 1u);
            EXPECT_EQ(out[0].shape, (Shape{5}));
            return std::make_shared<const float>(static_cast<float>(attrs.get_float("alpha")));
          });
  const Attrs attrs = d.bind_attrs({{"alpha", 3.0}});
  std::vector<Tensor> ins{testing::random_tensor({5}, DType::f32, 21)};
  ResolvedCall r = resolve_call(d, ins, attrs);
  EXPECT_EQ(prepared, 1);
  ASSERT_NE(r.prepared, nullptr);
  std::vector<Tensor> outs{empty({5})};
  for (int run = 0; run < 3; ++run) {
    ins[0] = testing::random_tensor({5}, DType::f32, 22 + static_cast<uint64_t>(run));
    run_resolved(r, d, ins, attrs, outs);
    EXPECT_TRUE(all_close(outs[0], ins[0] * 3.0, {0, 0})) << "run " << run;
  }
  EXPECT_EQ(prepared, 1) << "prepared once, at resolve time";
  ASSERT_EQ(seen.size(), 3u);
  for (const void* p : seen) EXPECT_EQ(p, r.prepared.get());
  OpCall eager{d, ins, attrs, KILN_HERE, Tensor(), nullptr};
  EXPECT_TRUE(all_close(run_kernel(eager)[0], ins[0] * 3.0, {0, 0}));
  EXPECT_EQ(seen.back(), nullptr) << "an eager call has no preparation";
  EXPECT_EQ(prepared, 1);
}

// Note [Resolved calls]: a call resolved once runs its tactic's kernel into given outputs as
// often as asked; resolving checks what run_kernel checks and raises the same errors; views and
// ops that cast their inputs are left to run_kernel.
TEST(Dispatch, ResolvedCallsRunTheKernelTheyResolved) {
  OpDef d = scale_op();
  Tensor x = testing::random_tensor({7}, DType::f32, 12);
  const Attrs attrs = d.bind_attrs({{"alpha", 3.0}});
  std::vector<Tensor> ins{x};
  ResolvedCall r = resolve_call(d, ins, attrs, "negated");
  ASSERT_NE(r.kernel, nullptr);
  EXPECT_EQ(r.kernel->tactic, "negated");
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].shape, (Shape{7}));
  std::vector<Tensor> outs{empty({7})};
  for (int run = 0; run < 2; ++run) {
    ins[0] = testing::random_tensor({7}, DType::f32, 13 + static_cast<uint64_t>(run));  // new data, same signature
    run_resolved(r, d, ins, attrs, outs);
    EXPECT_TRUE(all_close(outs[0], ins[0] * -3.0, {0, 0})) << "run " << run;
  }
  EXPECT_KILN_ERROR(resolve_call(d, ins, attrs, "blocked"), "scale", "no kernel for dtype f32 on cpu",
                    "tactic 'blocked'");
  EXPECT_KILN_ERROR(resolve_call(op("add"), std::vector<Tensor>{x, ones({2})}, op("add").bind_attrs({})), "add", "[7]",
                    "[2]");
  EXPECT_EQ(resolve_call(op("permute"), ins, op("permute").bind_attrs({{"dims", std::vector<int64_t>{0}}})).kernel,
            nullptr);  // a view
  EXPECT_EQ(resolve_call(op("exp"), std::vector<Tensor>{ones({3}, DType::i32)}, op("exp").bind_attrs({})).kernel,
            nullptr);  // casts its input to floating point
  // A casting op whose casts change nothing resolves, and runs as run_kernel would.
  Tensor y = testing::random_tensor({7}, DType::f32, 14);
  std::vector<Tensor> pair{x, y};
  ResolvedCall add_r = resolve_call(op("add"), pair, op("add").bind_attrs({}));
  ASSERT_NE(add_r.kernel, nullptr);
  std::vector<Tensor> sum{empty({7})};
  run_resolved(add_r, op("add"), pair, op("add").bind_attrs({}), sum);
  EXPECT_TRUE(all_close(sum[0], x + y, {0, 0}));
  EXPECT_EQ(resolve_call(op("add"), std::vector<Tensor>{x, y.to(DType::f64)}, op("add").bind_attrs({})).kernel,
            nullptr);  // casts x to f64
  EXPECT_NE(resolve_call(op("exp"), std::vector<Tensor>{x}, op("exp").bind_attrs({})).kernel, nullptr);
}

TEST(Dispatch, BadCallsAreErrorsNamingTheOpArgumentAndShape) {
  Tensor a = testing::random_tensor({2, 3}, DType::f32, 10), b = testing::random_tensor({4}, DType::f32, 11);
  EXPECT_KILN_ERROR(add(a, b), "add", "[2, 3]", "[4]");
  Tensor flags = zeros({3}, DType::boolean);
  EXPECT_KILN_ERROR(sub(flags, flags), "sub", "no kernel for dtype bool");
  Tensor small = ones({3});
  EXPECT_KILN_ERROR(small.add_(ones({2, 3})), "add_", "cannot change a tensor's shape", "[2, 3]", "[3]");
  Tensor ints = ones({3}, DType::i32);
  EXPECT_KILN_ERROR(ints.add_(ones({3}, DType::f32)), "add_", "dtype", "i32", "f32");
  Tensor bcast = ones({1, 3}).expand({2, 3});
  EXPECT_KILN_ERROR(bcast.add_(ones({2, 3})), "add_", "broadcast", "[2, 3]");
  EXPECT_KILN_ERROR(dispatch(op("add"), {a}), "add", "input");
  EXPECT_KILN_ERROR(op("addd"), "unknown op 'addd'");
}

#if !KILN_HAS_CUDA
TEST(Dispatch, CudaTensorsAreAClearErrorWithoutCuda) {
  EXPECT_FALSE(cuda_available());
  EXPECT_KILN_ERROR(empty({2}, TensorOptions(DType::f32, Device::cuda())), "cuda:0", "built without CUDA",
                    "-DKILN_CUDA=ON");
  EXPECT_KILN_ERROR(ones({2}).to(Device::cuda()), "cuda:0", "built without CUDA");
}
#endif

}  // namespace
}  // namespace kiln
