// Shape and dtype inference over IR types: the op's own rule, run on representative sizes.
#include <set>

#include "kiln/ir.h"

namespace kiln::ir {

// Note [Symbolic dims]
// A Dim is a static size or a named symbol times a static scale ("batch", "4*batch"). Ops infer on
// concrete shapes only, so infer_types runs the op's rule twice, each time giving every symbol a
// different representative size (large primes that static dims are unlikely to hit; each symbol
// its own), and maps the results back: an output dim equal in both runs is static; one that is
// the same whole multiple c of a symbol's representative in both runs is c*symbol (attention's
// [L, batch * heads, d] reshape); anything else (batch + 1, batch * seq, a dim that changes with
// the symbols in any other way) is reported as an error naming the op, rather than guessed. When the two runs disagree in dtype or rank, that is an error too. The
// cost: an op that would accept the representative sizes but reject a real one (a reshape whose
// attribute baked in a traced batch size fails here, which is what we want) is only caught at
// run time by the executor's check of each output against the graph's type.
namespace {

constexpr int64_t kReps[2][8] = {{1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049},
                                 {2003, 2011, 2017, 2027, 2029, 2039, 2053, 2063}};

std::vector<std::optional<TensorMeta>> concretize(const std::vector<std::optional<ValueType>>& inputs,
                                                  const std::vector<std::string>& symbols, int run) {
  std::vector<std::optional<TensorMeta>> out;
  for (const auto& t : inputs) {
    if (!t) {
      out.push_back(std::nullopt);
      continue;
    }
    TensorMeta m{t->dtype, {}};
    for (const Dim& d : t->shape) {
      if (!d.is_symbolic()) {
        m.shape.push_back(d.size);
        continue;
      }
      size_t k = 0;
      while (symbols[k] != d.symbol) ++k;
      m.shape.push_back(d.scale * kReps[run][k]);
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

std::vector<ValueType> infer_types(const OpDef& op, const std::vector<std::optional<ValueType>>& inputs,
                                   const Attrs& bound_attrs) {
  std::vector<std::string> symbols;
  {
    std::set<std::string> seen;
    for (const auto& t : inputs)
      if (t)
        for (const Dim& d : t->shape)
          if (d.is_symbolic() && seen.insert(d.symbol).second) symbols.push_back(d.symbol);
  }
  KILN_CHECK(symbols.size() <= 8, op.name(), ": at most 8 distinct symbolic dims per node, got ", symbols.size());
  if (symbols.empty()) {
    std::vector<std::optional<TensorMeta>> metas = concretize(inputs, symbols, 0);
    std::vector<ValueType> out;
    for (const TensorMeta& m : op.infer_meta(metas, bound_attrs)) out.push_back({m.dtype, static_shape(m.shape)});
    return out;
  }
  std::vector<TensorMeta> r0, r1;
  try {
    r0 = op.infer_meta(concretize(inputs, symbols, 0), bound_attrs);
    r1 = op.infer_meta(concretize(inputs, symbols, 1), bound_attrs);
  } catch (const Error& e) {
    std::string syms;
    for (size_t k = 0; k < symbols.size(); ++k) syms += (k ? ", " : "") + symbols[k] + "=" + std::to_string(kReps[0][k]);
    KILN_FAIL(e.what(), " [with the symbolic dims at representative sizes (", syms,
              "): the op's attributes or inputs fix a size the symbols must be free to take]");
  }
  KILN_CHECK(r0.size() == r1.size(), op.name(), ": the number of outputs depends on the symbolic dims (",
             r0.size(), " vs ", r1.size(), "); the graph cannot be symbolic in them");
  std::vector<ValueType> out;
  for (size_t i = 0; i < r0.size(); ++i) {
    KILN_CHECK(r0[i].dtype == r1[i].dtype && r0[i].shape.size() == r1[i].shape.size(), op.name(), ": output ", i,
               " changes dtype or rank with the symbolic dims (", meta_str(r0[i]), " vs ", meta_str(r1[i]), ")");
    ValueType t{r0[i].dtype, {}};
    for (size_t d = 0; d < r0[i].shape.size(); ++d) {
      int64_t a = r0[i].shape[d], b = r1[i].shape[d];
      if (a == b) {
        t.shape.push_back(Dim(a));
        continue;
      }
      bool found = false;
      for (size_t k = 0; k < symbols.size() && !found; ++k) {
        // scale * symbol: the same whole multiple of the symbol's representative in both runs.
        if (a % kReps[0][k] == 0 && b % kReps[1][k] == 0 && a / kReps[0][k] == b / kReps[1][k] && a > 0) {
          t.shape.push_back(Dim::sym(symbols[k], a / kReps[0][k]));
          found = true;
        }
      }
      KILN_CHECK(found, op.name(), ": output ", i, " dim ", d,
                 " depends on the symbolic dims in a way kiln cannot express (it is neither static nor a whole "
                 "multiple of one input symbol, e.g. batch+1 or batch*seq); make that dim static or keep the "
                 "symbols apart");
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace kiln::ir
