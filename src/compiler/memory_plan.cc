// The memory planner (Note [Memory planning]).
#include "compiler/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

namespace kiln::compiler {

// Note [Memory planning]
// Every non-view node output gets a buffer live from its node to its last use; graph outputs live
// to the end. View ops (OpDef::is_view: reshape, transpose, slice, ...) alias their input, so they
// get no buffer of their own: their uses extend the source buffer's lifetime (computed backwards,
// so a chain of views reaches its root). An op whose kernel may write over one of its inputs
// (OpDef::writes_over) writes its output in place into that input's buffer when the input dies at
// the op, is the buffer's own (contiguous) value, has the output's dtype and shape and is read by
// no other input of the node: pointwise ops over input 0 (eager runs the same kernels in place:
// add_, relu_, ...), and the blocked convolution over its residual (Note [Residual in place] in
// conv_nchwc.cc). Buffers are then placed largest first, each into the smallest gap between
// buffers whose lifetimes intersect its own (best fit), or above them all. Sizes are taken at the
// symbols' largest values, so the plan holds for every smaller batch.

namespace {
int64_t align_up(int64_t n) { return (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }
bool intersects(const BufferLifetime& a, const BufferLifetime& b) { return a.first <= b.last && b.first <= a.last; }
}  // namespace

std::vector<int64_t> assign_offsets(const std::vector<BufferLifetime>& buffers, int64_t& arena_bytes) {
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (buffers[a].bytes != buffers[b].bytes) return buffers[a].bytes > buffers[b].bytes;
    return buffers[a].first < buffers[b].first;
  });
  std::vector<int64_t> offsets(buffers.size(), -1);
  std::vector<size_t> placed;
  arena_bytes = 0;
  for (size_t i : order) {
    KILN_ASSERT(buffers[i].bytes >= 0 && buffers[i].first <= buffers[i].last, "bad buffer lifetime");
    int64_t need = align_up(buffers[i].bytes);
    std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of intersecting placed buffers
    for (size_t j : placed)
      if (intersects(buffers[i], buffers[j])) busy.emplace_back(offsets[j], offsets[j] + align_up(buffers[j].bytes));
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = 0, cursor = 0;
    for (const auto& [b, e] : busy) {
      if (b - cursor >= need && (best < 0 || b - cursor < best_gap)) {
        best = cursor;
        best_gap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    offsets[i] = best >= 0 ? best : cursor;
    arena_bytes = std::max(arena_bytes, offsets[i] + need);
    placed.push_back(i);
  }
  return offsets;
}

int64_t live_set_bound(const std::vector<BufferLifetime>& buffers) {
  int last = -1;
  for (const auto& b : buffers) last = std::max(last, b.last);
  std::vector<int64_t> delta(static_cast<size_t>(last + 2), 0);
  for (const auto& b : buffers) {
    delta[static_cast<size_t>(b.first)] += align_up(b.bytes);
    delta[static_cast<size_t>(b.last) + 1] -= align_up(b.bytes);
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) peak = std::max(peak, live += d);
  return peak;
}

int64_t value_bytes(const ir::ValueType& t, const std::map<std::string, int64_t>& symbol_max) {
  int64_t n = 1;
  for (const ir::Dim& d : t.shape) {
    int64_t size = d.size;
    if (d.is_symbolic()) {
      auto it = symbol_max.find(d.symbol);
      KILN_CHECK(it != symbol_max.end(), "memory plan: dim '", d.symbol, "' of ", ir::type_str(t),
                 " is symbolic and has no size bound; give it one (kiln compile --batch MIN:MAX, or --dim ",
                 d.symbol, "=N)");
      KILN_CHECK(d.scale >= 1 && it->second <= std::numeric_limits<int64_t>::max() / d.scale, "memory plan: dim ",
                 ir::dim_str(d), " of ", ir::type_str(t), " overflows 64-bit sizes at the symbols' largest values");
      size = d.at(it->second);
    }
    KILN_CHECK(size == 0 || n <= std::numeric_limits<int64_t>::max() / size, "memory plan: ", ir::type_str(t),
               " overflows 64-bit sizes at the symbols' largest values");
    n *= size;
  }
  int64_t elem = static_cast<int64_t>(dtype_size(t.dtype));
  KILN_CHECK(n <= std::numeric_limits<int64_t>::max() / elem, "memory plan: ", ir::type_str(t),
             " overflows 64-bit sizes at the symbols' largest values");
  return n * elem;
}

GraphMemoryPlan plan_memory(const ir::Graph& g, const std::map<std::string, int64_t>& symbol_max) {
  GraphMemoryPlan plan;
  auto nodes = g.nodes();
  const int end = static_cast<int>(nodes.size());

  // Last use of every value; a view's uses count as uses of its sources.
  std::map<const ir::Value*, int> last_use;
  for (const ir::Value* v : g.outputs()) last_use[v] = end;
  for (int i = end - 1; i >= 0; --i) {
    const ir::Node* n = nodes[static_cast<size_t>(i)];
    int view_last = i;
    if (n->op().is_view())
      for (const ir::Value* o : n->outputs()) {
        auto it = last_use.find(o);
        if (it != last_use.end()) view_last = std::max(view_last, it->second);
      }
    for (const ir::Value* v : n->inputs()) {
      if (!v) continue;
      int& l = last_use.try_emplace(v, -1).first->second;
      l = std::max(l, view_last);
    }
  }

  for (const ir::Value* v : g.inputs()) plan.values[v] = ValuePlacement{ValuePlacement::Kind::input, -1, 0, 0, false};
  for (const ir::Value* v : g.constants()) plan.values[v] = ValuePlacement{ValuePlacement::Kind::constant, -1, 0, 0, false};

  std::vector<const ir::Value*> buffer_root;  // the value a buffer was made for
  for (int i = 0; i < end; ++i) {
    const ir::Node* n = nodes[static_cast<size_t>(i)];
    if (n->op().is_view()) {
      int source = -1;
      for (const ir::Value* v : n->inputs())
        if (v && source < 0) source = plan.values.at(v).buffer;
      for (const ir::Value* o : n->outputs()) {
        plan.values[o] = ValuePlacement{ValuePlacement::Kind::view, source, 0, 0, false};
        ++plan.view_count;
      }
      continue;
    }
    // The input a single-output node's kernel may write over (Note [Memory planning]), or -1.
    int w = -1;
    if (n->outputs().size() == 1) {
      std::vector<bool> present;
      for (const ir::Value* v : n->inputs()) present.push_back(v != nullptr);
      w = n->op().writable_input(n->attrs(), present);
    }
    for (size_t k = 0; k < n->outputs().size(); ++k) {
      const ir::Value* o = n->outputs()[k];
      int64_t bytes = value_bytes(o->type(), symbol_max);
      int own_last = std::max(i, last_use.count(o) ? last_use.at(o) : i);
      ValuePlacement p{ValuePlacement::Kind::arena, -1, 0, bytes, false};
      // In place over that input.
      const ir::Value* x = w >= 0 ? n->inputs()[static_cast<size_t>(w)] : nullptr;
      if (x) {
        const ValuePlacement& xp = plan.values.at(x);
        bool ok = xp.kind == ValuePlacement::Kind::arena && x->type() == o->type() && xp.bytes == bytes &&
                  buffer_root[static_cast<size_t>(xp.buffer)] == x &&
                  plan.buffers[static_cast<size_t>(xp.buffer)].last == i;
        for (size_t j = 0; ok && j < n->inputs().size(); ++j) {
          const ir::Value* y = n->inputs()[j];
          ok = j == static_cast<size_t>(w) || !y || plan.values.at(y).buffer != xp.buffer;
        }
        if (ok) {
          p.buffer = xp.buffer;
          p.inplace = true;
          plan.buffers[static_cast<size_t>(xp.buffer)].last = own_last;
          ++plan.inplace_count;
          buffer_root[static_cast<size_t>(xp.buffer)] = o;
        }
      }
      if (!p.inplace) {
        p.buffer = static_cast<int>(plan.buffers.size());
        plan.buffers.push_back(BufferLifetime{bytes, i, own_last});
        buffer_root.push_back(o);
      }
      plan.sum_bytes += align_up(bytes);
      plan.values[o] = p;
    }
  }
  // A view's uses were folded into its sources' last uses; stretch buffers to cover them.
  for (const auto& [v, p] : plan.values) {
    if (p.kind != ValuePlacement::Kind::arena) continue;
    auto it = last_use.find(v);
    if (it != last_use.end()) {
      auto& b = plan.buffers[static_cast<size_t>(p.buffer)];
      b.last = std::max(b.last, it->second);
    }
  }
  plan.offsets = assign_offsets(plan.buffers, plan.arena_bytes);
  plan.lower_bound = live_set_bound(plan.buffers);
  for (auto& [v, p] : plan.values)
    if (p.kind == ValuePlacement::Kind::arena) p.offset = plan.offsets[static_cast<size_t>(p.buffer)];
  return plan;
}

std::string memory_summary(int64_t arena_bytes, int64_t sum_bytes, int64_t lower_bound, int64_t buffers,
                           int64_t inplace, int64_t views) {
  auto mib = [](int64_t b) {
    char s[32];
    if (b < 10 * 1024) std::snprintf(s, sizeof s, "%lld B", static_cast<long long>(b));
    else if (b < 10 * 1024 * 1024) std::snprintf(s, sizeof s, "%.1f KiB", static_cast<double>(b) / 1024.0);
    else std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
    return std::string(s);
  };
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "arena %s = %.1f%% of %s of intermediates (lower bound, the largest live set: %s); "
                "%lld buffers, %lld outputs in place, %lld views",
                mib(arena_bytes).c_str(), sum_bytes ? 100.0 * static_cast<double>(arena_bytes) / static_cast<double>(sum_bytes) : 0.0,
                mib(sum_bytes).c_str(), mib(lower_bound).c_str(), static_cast<long long>(buffers), static_cast<long long>(inplace),
                static_cast<long long>(views));
  return buf;
}

std::string GraphMemoryPlan::summary() const {
  return memory_summary(arena_bytes, sum_bytes, lower_bound, static_cast<int64_t>(buffers.size()), inplace_count,
                        view_count);
}

}  // namespace kiln::compiler
