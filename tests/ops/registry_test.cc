// The registry walk: every op has an inference rule, a way to run on the CPU (a view function or a
// kernel), and in each rule slot (vjp, batch, ONNX) either a rule or a stated reason why not. The
// failures list every offending op, so one run shows all that is missing.
#include <limits>
#include <set>
#include <sstream>

#include "support/testing.h"

namespace kiln {
namespace {

const char* kind_name(RuleStatus::Kind k) {
  switch (k) {
    case RuleStatus::Kind::missing: return "missing";
    case RuleStatus::Kind::provided: return "provided";
    case RuleStatus::Kind::not_applicable: return "not applicable";
    case RuleStatus::Kind::pending: return "pending";
  }
  return "?";
}

// "" when the slot is in order, else what is wrong with it.
std::string slot_problem(const char* slot, const RuleStatus& s, bool has_rule) {
  switch (s.kind) {
    case RuleStatus::Kind::missing:
      return std::string(slot) + ": no rule and no stated reason";
    case RuleStatus::Kind::provided:
      return has_rule ? "" : std::string(slot) + ": marked provided but holds no rule";
    case RuleStatus::Kind::not_applicable:
    case RuleStatus::Kind::pending:
      if (s.reason.empty()) return std::string(slot) + ": " + kind_name(s.kind) + " without a reason";
      return has_rule ? std::string(slot) + ": holds a rule but is marked " + kind_name(s.kind) : "";
  }
  return std::string(slot) + ": bad status";
}

TEST(Registry, EveryOpHasItsRulesOrAStatedReason) {
  const auto ops = OpRegistry::instance().all();
  ASSERT_FALSE(ops.empty());
  std::ostringstream offenders;
  int bad = 0;
  for (const OpDef* d : ops) {
    std::vector<std::string> problems;
    auto add = [&](const std::string& p) {
      if (!p.empty()) problems.push_back(p);
    };
    add(slot_problem("vjp", d->vjp_status(), d->vjp_rule() && d->vjp_rule()->fn));
    add(slot_problem("batch", d->batch_status(), d->batch_rule() && d->batch_rule()->fn));
    add(slot_problem("onnx", d->onnx_status(), d->onnx_mapping().has_value()));
    if (d->onnx_mapping() && (d->onnx_mapping()->op_type.empty() || d->onnx_mapping()->since_opset <= 0))
      add("onnx: mapping without an op type or opset");
    if (!d->infer_fn()) add("no shape/dtype inference rule");
    bool cpu_kernel = false;
    for (const KernelEntry& k : d->kernels()) {
      if (k.device == DeviceType::cpu) cpu_kernel = true;
      if (!k.fn) add("a kernel entry (tactic '" + k.tactic + "') without a function");
      if (k.dtypes.empty()) add("a kernel entry (tactic '" + k.tactic + "') for no dtype");
    }
    if (!d->is_view() && !cpu_kernel) add("neither a view function nor a CPU kernel");
    if (!problems.empty()) {
      ++bad;
      offenders << "  " << d->name() << ":";
      for (const auto& p : problems) offenders << " [" << p << "]";
      offenders << "\n";
    }
  }
  EXPECT_EQ(bad, 0) << bad << " of " << ops.size() << " ops lack a rule without a stated reason:\n"
                    << offenders.str();
}

// Autograd (issue #4) filled every derivative slot: an op either has a vjp rule or states why it
// has none (integer/bool outputs, ...). "Pending" is no longer accepted for the vjp slot.
TEST(Registry, NoOpIsVjpPending) {
  std::ostringstream offenders;
  int bad = 0;
  for (const OpDef* d : OpRegistry::instance().all()) {
    if (d->vjp_status().kind == RuleStatus::Kind::provided || d->vjp_status().kind == RuleStatus::Kind::not_applicable)
      continue;
    ++bad;
    offenders << "  " << d->name() << ": vjp " << kind_name(d->vjp_status().kind) << "\n";
  }
  EXPECT_EQ(bad, 0) << bad << " ops have no derivative rule and no reason why not:\n" << offenders.str();
}

TEST(Registry, NamesAreUniqueSortedAndFindable) {
  const auto ops = OpRegistry::instance().all();
  std::set<std::string> names;
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_TRUE(names.insert(ops[i]->name()).second) << "duplicate op " << ops[i]->name();
    if (i) {
      EXPECT_LT(ops[i - 1]->name(), ops[i]->name());
    }
    EXPECT_EQ(OpRegistry::instance().find(ops[i]->name()), ops[i]);
    EXPECT_EQ(&op(ops[i]->name()), ops[i]);
  }
  EXPECT_EQ(OpRegistry::instance().find("no_such_op"), nullptr);
  EXPECT_KILN_ERROR(op("no_such_op"), "unknown op 'no_such_op'");
}

// The operators the core issue delivers, each registered under its schema name.
TEST(Registry, HoldsTheCoreOperatorSet) {
  const std::vector<std::string> expected = {
      // unary
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "relu",
      "leaky_relu", "elu", "hardsigmoid", "hardswish", "gelu", "silu", "softplus", "erf", "floor", "ceil", "round",
      "sign", "clip",
      // binary, comparison, logical, where, cast
      "add", "sub", "mul", "div", "pow", "mod", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
      "logical_and", "logical_or", "logical_xor", "logical_not", "where", "cast",
      // reductions
      "sum", "mean", "max", "min", "argmax", "argmin", "prod", "var", "std_dev", "logsumexp", "norm",
      // linalg, conv, pooling, normalization
      "matmul", "gemm", "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool", "lrn", "softmax", "log_softmax",
      "layer_norm", "batch_norm",
      // shape and index
      "concat", "split", "slice", "gather", "gather_elements", "scatter", "pad", "tile", "permute", "reshape",
      "expand", "squeeze", "unsqueeze", "trilu", "cumsum", "one_hot", "topk"};
  std::vector<std::string> missing;
  for (const auto& name : expected)
    if (!OpRegistry::instance().find(name)) missing.push_back(name);
  std::string list;
  for (const auto& m : missing) list += " " + m;
  EXPECT_TRUE(missing.empty()) << "ops not registered:" << list;
}

TEST(Registry, EverySchemaParsesBackToItself) {
  for (const OpDef* d : OpRegistry::instance().all()) {
    SCOPED_TRACE(d->schema().text);
    Schema again = Schema::parse(d->schema().text);
    EXPECT_EQ(again.name, d->name());
    EXPECT_EQ(again.inputs.size(), d->schema().inputs.size());
    EXPECT_EQ(again.outputs, d->schema().outputs);
    ASSERT_EQ(again.attrs.size(), d->schema().attrs.size());
    EXPECT_FALSE(d->schema().outputs.empty());
    for (size_t i = 0; i < again.attrs.size(); ++i) {
      const AttrSpec& a = d->schema().attrs[i];
      EXPECT_EQ(again.attrs[i].name, a.name);
      EXPECT_EQ(again.attrs[i].type, a.type);
      if (a.default_value) {
        EXPECT_EQ(attr_type_of(*a.default_value), a.type) << d->name() << "." << a.name;
      }
    }
    // Binding no attributes fills every default; only required ones may be reported missing.
    bool has_required = false;
    for (const AttrSpec& a : d->schema().attrs) has_required |= !a.default_value && !a.nullable;
    if (!has_required) {
      Attrs bound = d->bind_attrs({});
      for (const AttrSpec& a : d->schema().attrs)
        EXPECT_EQ(bound.has(a.name), a.default_value.has_value()) << d->name() << "." << a.name;
    } else {
      EXPECT_KILN_ERROR(d->bind_attrs({}), d->name(), "required attribute");
    }
  }
}

// A bound attribute set equals itself even when it holds a NaN (the verifier checks that a node's
// attributes are already in bound form; a NaN alpha from an ONNX file once failed that check), and
// the float comparison is by value identity: 0.0 and -0.0 are different arguments.
TEST(Registry, BoundAttributesHoldingNaNEqualThemselves) {
  const OpDef* gemm = OpRegistry::instance().find("gemm");
  ASSERT_NE(gemm, nullptr);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Attrs bound = gemm->bind_attrs({{"alpha", nan}});
  EXPECT_TRUE(bound == gemm->bind_attrs(bound));
  const AttrValue with_nan = std::vector<double>{1.0, nan};
  EXPECT_TRUE(attr_values_identical(with_nan, AttrValue(std::vector<double>{1.0, nan})));
  EXPECT_FALSE(attr_values_identical(AttrValue(0.0), AttrValue(-0.0)));
  EXPECT_FALSE(attr_values_identical(AttrValue(1.0), AttrValue(int64_t{1})));
  EXPECT_FALSE(bound == gemm->bind_attrs({{"alpha", 1.0}}));
}

}  // namespace
}  // namespace kiln
