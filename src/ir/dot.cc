// Pictures of graphs: DOT text, rendered through Graphviz's `dot`.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/ir.h"

namespace kiln::ir {

namespace {
std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}
std::string short_attrs(const Attrs& a) {
  std::string s;
  for (const auto& [k, v] : a.values()) {
    std::string vs = attr_value_str(v);
    if (vs.size() > 24) vs.resize(21), vs.append("...");
    s.append("\\n").append(escape(k + "=" + vs));
  }
  return s;
}
}  // namespace

// Inputs and outputs are ellipses, nodes boxes with their attributes; edges carry the value's
// name and type. Constants are collapsed into the consuming node's label ("w: f32[3, 4]") rather
// than drawn as nodes, so a model's picture shows its computation, not its weights.
std::string to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph \"" << escape(g.name) << "\" {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::map<const Value*, std::string> src;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    os << "  in" << i << " [shape=ellipse, style=filled, fillcolor=\"#dbeafe\", label=\"%" << escape(v->name()) << "\\n"
       << type_str(v->type()) << "\"];\n";
    src[v] = std::string("in").append(std::to_string(i));
  }
  auto nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* n = nodes[i];
    std::string consts;
    for (const Value* v : n->inputs())
      if (v && v->kind() == Value::Kind::constant) consts.append("\\n").append(escape("%" + v->name() + ": " + type_str(v->type())));
    os << "  n" << i << " [shape=box, style=\"rounded,filled\", fillcolor=\"#f3f4f6\", label=\"" << escape(n->op().name())
       << short_attrs(n->attrs()) << consts << "\"];\n";
    for (const Value* v : n->outputs()) src[v] = std::string("n").append(std::to_string(i));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* v : nodes[i]->inputs()) {
      if (!v || v->kind() == Value::Kind::constant || !src.count(v)) continue;
      os << "  " << src[v] << " -> n" << i << " [label=\"%" << escape(v->name()) << "\\n" << type_str(v->type()) << "\"];\n";
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* v = g.outputs()[i];
    os << "  out" << i << " [shape=ellipse, style=filled, fillcolor=\"#dcfce7\", label=\"output " << i << "\"];\n";
    if (src.count(v))
      os << "  " << src[v] << " -> out" << i << " [label=\"%" << escape(v->name()) << "\\n" << type_str(v->type()) << "\"];\n";
    else
      os << "  c_out" << i << " [shape=note, label=\"%" << escape(v->name()) << ": " << type_str(v->type())
         << "\"];\n  c_out" << i << " -> out" << i << ";\n";
  }
  os << "}\n";
  return os.str();
}

void draw(const Graph& g, const std::string& path) {
  auto dot = path.rfind('.');
  std::string ext = dot == std::string::npos ? "" : path.substr(dot + 1);
  std::string text = to_dot(g);
  if (ext == "dot" || ext == "gv") {
    std::ofstream f(path);
    KILN_CHECK(f.good(), "draw: cannot write '", path, "'");
    f << text;
    return;
  }
  KILN_CHECK(ext == "svg" || ext == "png" || ext == "pdf", "draw: unsupported picture format '", path,
             "'; use .svg, .png, .pdf or .dot");
  for (char c : path)
    KILN_CHECK(c != '\'' && c != '\n', "draw: the path '", path, "' contains a quote or newline");
  std::string cmd = "dot -T" + ext + " -o '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "w");
  KILN_CHECK(p != nullptr, "draw: could not start Graphviz's `dot`");
  fwrite(text.data(), 1, text.size(), p);
  int rc = pclose(p);
  KILN_CHECK(rc == 0, "draw: `dot -T", ext, "` failed (exit status ", rc,
             "); is Graphviz installed? (scripts/install-deps.sh installs it)");
}

}  // namespace kiln::ir
