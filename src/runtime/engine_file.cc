// Engine files: serialize / deserialize (Note [Engine file format]).
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

#include "kiln/runtime.h"
#include "kiln/version.h"

namespace kiln::runtime {

// Note [Engine file format]
// A 64-byte header, then the metadata, then the constants, each at a 64-byte aligned offset in the
// file (so a loader may map the file and use weights where they lie):
//   0  "KILNENG\0"            8  u32 format version     12 u32 header size (64)
//   16 u64 file size          24 u64 checksum           32 u64 metadata offset
//   40 u64 metadata size      48 u64 constants offset   56 u64 constants size
// All integers little-endian. The checksum is FNV-1a 64 over the whole file with its own 8 bytes
// read as zeros, so any flipped bit anywhere is caught. A reader checks, in order: the size of the
// header, the magic, the version, the recorded against the actual size (truncation), the checksum,
// then parses the metadata with every read bounds-checked, then the target, then the engine's own
// invariants (Engine::validate). Each failure is a kiln::Error that names the file and the problem.
// Version 2 (the version 1 target string became the Target): the metadata starts with the kiln
// version, then the target (arch, isa, i64 cores, threads, L1d, L2, L3 bytes, memory budget, u8
// objective); each step ends with its tactic (empty: the op's first kernel). Version 3: then the
// tactic for small batches (empty: none) and, when there is one, i64 the largest batch it runs
// (Note [Tactics per batch bucket]), and an arena value's offset and bytes are per unit of batch
// when the engine has a batch symbol (Note [Arena slots scale with the batch]). Version 4: the
// same bytes, but a blocked convolution's output may share its residual's arena slot (Note
// [Residual in place] in conv_nchwc.cc), which an older kiln's kernel would overwrite before its
// last slice read it. Files of another version are refused with "recompile the model".

namespace {

constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'G', '\0'};
constexpr size_t kHeaderSize = 64;
constexpr size_t kChecksumAt = 24;

uint64_t fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes.size(); ++i) {
    unsigned char c = (i >= kChecksumAt && i < kChecksumAt + 8) ? 0 : static_cast<unsigned char>(bytes[i]);
    h = (h ^ c) * 1099511628211ull;
  }
  return h;
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

class Writer {
 public:
  std::string out;
  template <class T>
  void pod(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out.append(b, sizeof(T));
  }
  void u8(uint8_t v) { pod(v); }
  void u32(uint32_t v) { pod(v); }
  void i64(int64_t v) { pod(v); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    out += s;
  }
  void shape(const ir::SymShape& s) {
    u32(static_cast<uint32_t>(s.size()));
    for (const ir::Dim& d : s) {
      // Tags: 0 static, 1 symbol, 2 scaled symbol (scale * symbol).
      u8(d.is_symbolic() ? (d.scale == 1 ? 1 : 2) : 0);
      if (d.is_symbolic()) str(d.symbol);
      else i64(d.size);
      if (d.is_symbolic() && d.scale != 1) i64(d.scale);
    }
  }
  void ids(const std::vector<int32_t>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (int32_t x : v) pod(x);
  }
  void attr(const AttrValue& v) {
    u8(static_cast<uint8_t>(v.index()));
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t>) i64(x);
          else if constexpr (std::is_same_v<T, double>) pod(x);
          else if constexpr (std::is_same_v<T, bool>) u8(x ? 1 : 0);
          else if constexpr (std::is_same_v<T, std::string>) str(x);
          else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            u32(static_cast<uint32_t>(x.size()));
            for (int64_t e : x) i64(e);
          } else if constexpr (std::is_same_v<T, std::vector<double>>) {
            u32(static_cast<uint32_t>(x.size()));
            for (double e : x) pod(e);
          } else {
            u8(static_cast<uint8_t>(x));
          }
        },
        v);
  }
};

// Bounds-checked reads; every failure names the file, the section and the byte offset.
class Reader {
 public:
  Reader(const std::string& bytes, size_t begin, size_t end, std::string source)
      : b_(bytes), pos_(begin), end_(end), source_(std::move(source)) {}
  void need(size_t n, const char* what) {
    KILN_CHECK(n <= end_ - pos_, "engine file '", source_, "' is corrupt: ", what, " at byte ", pos_, " needs ", n,
               " bytes but the metadata ends at byte ", end_);
  }
  template <class T>
  T pod(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint8_t u8(const char* what) { return pod<uint8_t>(what); }
  uint32_t u32(const char* what) { return pod<uint32_t>(what); }
  int64_t i64(const char* what) { return pod<int64_t>(what); }
  // A count of items each at least `min_item` bytes: refused when the rest of the metadata cannot hold them.
  size_t count(const char* what, size_t min_item) {
    uint32_t n = u32(what);
    KILN_CHECK(static_cast<uint64_t>(n) * min_item <= end_ - pos_, "engine file '", source_, "' is corrupt: ", what,
               " count ", n, " at byte ", pos_ - 4, " exceeds what the remaining ", end_ - pos_, " bytes can hold");
    return n;
  }
  std::string str(const char* what) {
    size_t n = count(what, 1);
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  DType dtype(const char* what) {
    uint8_t d = u8(what);
    KILN_CHECK(d < kNumDTypes, "engine file '", source_, "' is corrupt: ", what, " has dtype code ", int{d},
               " (kiln knows ", kNumDTypes, ")");
    return static_cast<DType>(d);
  }
  ir::SymShape shape(const char* what) {
    size_t rank = count(what, 2);
    ir::SymShape s;
    for (size_t i = 0; i < rank; ++i) {
      uint8_t sym = u8(what);
      KILN_CHECK(sym <= 2, "engine file '", source_, "' is corrupt: ", what, " has a bad dim tag ", int{sym});
      if (sym) {
        std::string name = str(what);
        int64_t scale = sym == 2 ? i64(what) : 1;
        KILN_CHECK(scale >= 1 && !name.empty(), "engine file '", source_, "' is corrupt: ", what,
                   " has a bad symbolic dim (scale ", scale, ")");
        s.push_back(ir::Dim::sym(std::move(name), scale));
      } else {
        int64_t d = i64(what);
        KILN_CHECK(d >= 0, "engine file '", source_, "' is corrupt: ", what, " has negative dim ", d);
        s.emplace_back(d);
      }
    }
    return s;
  }
  std::vector<int32_t> ids(const char* what) {
    size_t n = count(what, 4);
    std::vector<int32_t> v(n);
    for (auto& x : v) x = pod<int32_t>(what);
    return v;
  }
  AttrValue attr(const char* what) {
    uint8_t t = u8(what);
    switch (t) {
      case 0: return i64(what);
      case 1: return pod<double>(what);
      case 2: return u8(what) != 0;
      case 3: return str(what);
      case 4: {
        std::vector<int64_t> v(count(what, 8));
        for (auto& x : v) x = i64(what);
        return v;
      }
      case 5: {
        std::vector<double> v(count(what, 8));
        for (auto& x : v) x = pod<double>(what);
        return v;
      }
      case 6: return dtype(what);
      default:
        KILN_FAIL("engine file '", source_, "' is corrupt: ", what, " has attribute type code ", int{t});
    }
  }
  size_t pos() const { return pos_; }
  size_t end() const { return end_; }

 private:
  const std::string& b_;
  size_t pos_, end_;
  std::string source_;
};

template <class T>
void put_at(std::string& s, size_t at, T v) {
  std::memcpy(s.data() + at, &v, sizeof(T));
}
template <class T>
T get_at(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(T));
  return v;
}

}  // namespace

std::string Engine::serialize() const {
  validate();
  Writer m;
  m.str(kiln_version);
  m.str(target.arch);
  m.str(target.isa);
  for (int64_t x : {int64_t{target.cores}, int64_t{target.threads}, target.l1d_bytes, target.l2_bytes, target.l3_bytes,
                    target.memory_budget})
    m.i64(x);
  m.u8(static_cast<uint8_t>(target.objective));
  m.str(name);
  m.str(batch.symbol);
  m.i64(batch.min);
  m.i64(batch.max);
  for (int64_t x : {memory.arena_bytes, memory.sum_bytes, memory.lower_bound, memory.buffers, memory.inplace, memory.views})
    m.i64(x);
  // Constants: dtype, shape and where their bytes lie in the constants section.
  std::vector<size_t> const_at;
  size_t const_size = 0;
  for (const Tensor& c : constants) {
    const_at.push_back(const_size);
    const_size = align64(const_size + static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  }
  m.u32(static_cast<uint32_t>(constants.size()));
  for (size_t i = 0; i < constants.size(); ++i) {
    m.u8(static_cast<uint8_t>(constants[i].dtype()));
    m.shape(ir::static_shape(constants[i].shape()));
    m.i64(static_cast<int64_t>(const_at[i]));
  }
  m.u32(static_cast<uint32_t>(values.size()));
  for (const EngineValue& v : values) {
    m.str(v.name);
    m.u8(static_cast<uint8_t>(v.kind));
    m.u8(static_cast<uint8_t>(v.dtype));
    m.shape(v.shape);
    m.i64(v.index);
    m.i64(v.offset);
    m.i64(v.bytes);
  }
  m.u32(static_cast<uint32_t>(steps.size()));
  for (const EngineStep& st : steps) {
    m.str(st.name);
    m.str(st.op->name());
    m.u32(static_cast<uint32_t>(st.attrs.values().size()));
    for (const auto& [k, v] : st.attrs.values()) {
      m.str(k);
      m.attr(v);
    }
    m.ids(st.inputs);
    m.ids(st.outputs);
    m.str(st.tactic);
    m.str(st.small_tactic);
    if (!st.small_tactic.empty()) m.i64(st.small_batch_max);
  }
  m.ids(inputs);
  m.ids(outputs);
  m.u32(static_cast<uint32_t>(input_names.size()));
  for (const auto& s : input_names) m.str(s);
  m.u32(static_cast<uint32_t>(output_names.size()));
  for (const auto& s : output_names) m.str(s);

  size_t meta_at = kHeaderSize, consts_at = align64(meta_at + m.out.size());
  std::string file(consts_at + const_size, '\0');
  std::memcpy(file.data(), kMagic, 8);
  put_at<uint32_t>(file, 8, kEngineFormatVersion);
  put_at<uint32_t>(file, 12, static_cast<uint32_t>(kHeaderSize));
  put_at<uint64_t>(file, 16, file.size());
  put_at<uint64_t>(file, 32, meta_at);
  put_at<uint64_t>(file, 40, m.out.size());
  put_at<uint64_t>(file, 48, consts_at);
  put_at<uint64_t>(file, 56, const_size);
  std::memcpy(file.data() + meta_at, m.out.data(), m.out.size());
  for (size_t i = 0; i < constants.size(); ++i)
    if (constants[i].numel() > 0)
      std::memcpy(file.data() + consts_at + const_at[i], constants[i].contiguous().data_ptr(),
                  static_cast<size_t>(constants[i].numel()) * dtype_size(constants[i].dtype()));
  put_at<uint64_t>(file, kChecksumAt, fnv1a(file));
  return file;
}

void Engine::save(const std::string& path) const {
  std::string bytes = serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f, "cannot open '", path, "' for writing the engine");
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  KILN_CHECK(f.good(), "writing the engine to '", path, "' failed");
}

Engine Engine::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f, "cannot open engine file '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return deserialize(ss.str(), path);
}

Engine Engine::deserialize(const std::string& bytes, const std::string& source) {
  const std::string& src = source;
  KILN_CHECK(bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic, 8) == 0, "'", src,
             "' is not a kiln engine file (it does not start with the magic \"KILNENG\\0\"",
             bytes.size() < 8 ? "; it has only " + std::to_string(bytes.size()) + " bytes" : std::string(), ")");
  KILN_CHECK(bytes.size() >= kHeaderSize, "engine file '", src, "' is truncated: ", bytes.size(),
             " bytes, but the header alone is ", kHeaderSize);
  uint32_t version = get_at<uint32_t>(bytes, 8);
  KILN_CHECK(version == kEngineFormatVersion, "engine file '", src, "' has format version ", version,
             " but this kiln (", kVersion, ") reads version ", kEngineFormatVersion, "; recompile the model");
  KILN_CHECK(get_at<uint32_t>(bytes, 12) == kHeaderSize, "engine file '", src, "' is corrupt: header size ",
             get_at<uint32_t>(bytes, 12), ", expected ", kHeaderSize);
  uint64_t file_size = get_at<uint64_t>(bytes, 16);
  KILN_CHECK(file_size <= bytes.size(), "engine file '", src, "' is truncated: ", bytes.size(),
             " bytes, its header says ", file_size);
  KILN_CHECK(file_size == bytes.size(), "engine file '", src, "' is corrupt: ", bytes.size(),
             " bytes, its header says ", file_size, " (trailing data)");
  uint64_t want = get_at<uint64_t>(bytes, kChecksumAt), got = fnv1a(bytes);
  KILN_CHECK(want == got, "engine file '", src, "' is corrupt: checksum mismatch (stored ", want, ", computed ", got,
             "); the file was damaged or modified");
  uint64_t meta_at = get_at<uint64_t>(bytes, 32), meta_size = get_at<uint64_t>(bytes, 40);
  uint64_t consts_at = get_at<uint64_t>(bytes, 48), const_size = get_at<uint64_t>(bytes, 56);
  KILN_CHECK(meta_at == kHeaderSize && meta_size <= file_size - meta_at && consts_at % 64 == 0 &&
                 consts_at >= meta_at + meta_size && consts_at <= file_size && const_size == file_size - consts_at,
             "engine file '", src, "' is corrupt: sections (metadata at ", meta_at, "+", meta_size, ", constants at ",
             consts_at, "+", const_size, ") do not fit the ", file_size, "-byte file");

  Reader r(bytes, meta_at, meta_at + meta_size, src);
  Engine e;
  e.kiln_version = r.str("kiln version");
  e.target.arch = r.str("target arch");
  e.target.isa = r.str("target isa");
  int64_t cores = r.i64("target cores"), threads = r.i64("target threads");
  KILN_CHECK(cores >= 1 && cores <= 1 << 20 && threads >= 1 && threads <= 1 << 20, "engine file '", src,
             "' is corrupt: target has ", cores, " cores and ", threads, " threads");
  e.target.cores = static_cast<int>(cores);
  e.target.threads = static_cast<int>(threads);
  e.target.l1d_bytes = r.i64("target L1d size");
  e.target.l2_bytes = r.i64("target L2 size");
  e.target.l3_bytes = r.i64("target L3 size");
  e.target.memory_budget = r.i64("target memory budget");
  uint8_t objective = r.u8("target objective");
  KILN_CHECK(objective <= 1 && e.target.l1d_bytes >= 0 && e.target.l2_bytes >= 0 && e.target.l3_bytes >= 0 &&
                 e.target.memory_budget >= 0,
             "engine file '", src, "' is corrupt: bad target fields (objective code ", int{objective}, ")");
  e.target.objective = static_cast<Target::Objective>(objective);
  std::string why;
  KILN_CHECK(e.target.runs_here(&why), "engine file '", src, "': ", why);
  e.name = r.str("engine name");
  e.batch.symbol = r.str("batch symbol");
  e.batch.min = r.i64("batch range");
  e.batch.max = r.i64("batch range");
  int64_t* stats[] = {&e.memory.arena_bytes, &e.memory.sum_bytes, &e.memory.lower_bound,
                      &e.memory.buffers, &e.memory.inplace, &e.memory.views};
  for (int64_t* s : stats) *s = r.i64("memory stats");

  // The constants section, copied once into 64-byte aligned memory the constant tensors view.
  std::shared_ptr<void> blob;
  if (const_size > 0) {
    void* p = ::operator new(const_size, std::align_val_t{64});
    blob = std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t{64}); });
    std::memcpy(p, bytes.data() + consts_at, const_size);
  }
  size_t nconst = r.count("constants", 7);
  for (size_t i = 0; i < nconst; ++i) {
    DType dt = r.dtype("constant dtype");
    ir::SymShape s = r.shape("constant shape");
    int64_t at = r.i64("constant offset");
    Shape shape;
    uint64_t bytes_needed = dtype_size(dt);
    for (const ir::Dim& d : s) {
      KILN_CHECK(!d.is_symbolic(), "engine file '", src, "' is corrupt: constant ", i, " has a symbolic dim");
      KILN_CHECK(d.size == 0 || bytes_needed <= const_size / static_cast<uint64_t>(d.size), "engine file '", src,
                 "' is corrupt: constant ", i, " of shape ", ir::shape_str(s), " is larger than the constants section");
      bytes_needed *= static_cast<uint64_t>(d.size);
      shape.push_back(d.size);
    }
    KILN_CHECK(at >= 0 && at % 64 == 0 && static_cast<uint64_t>(at) <= const_size &&
                   bytes_needed <= const_size - static_cast<uint64_t>(at),
               "engine file '", src, "' is corrupt: constant ", i, " (", bytes_needed, " bytes at ", at,
               ") lies outside the ", const_size, "-byte constants section");
    if (bytes_needed == 0) e.constants.push_back(empty(shape, TensorOptions(dt)));
    else e.constants.push_back(from_blob(static_cast<char*>(blob.get()) + at, shape, dt, blob));
  }
  size_t nvalues = r.count("values", 31);
  for (size_t i = 0; i < nvalues; ++i) {
    EngineValue v;
    v.name = r.str("value name");
    uint8_t kind = r.u8("value kind");
    KILN_CHECK(kind <= 3, "engine file '", src, "' is corrupt: value '", v.name, "' has kind code ", int{kind});
    v.kind = static_cast<EngineValue::Kind>(kind);
    v.dtype = r.dtype("value dtype");
    v.shape = r.shape("value shape");
    v.index = r.i64("value index");
    v.offset = r.i64("value offset");
    v.bytes = r.i64("value bytes");
    e.values.push_back(std::move(v));
  }
  size_t nsteps = r.count("steps", 24);
  for (size_t i = 0; i < nsteps; ++i) {
    EngineStep st;
    st.name = r.str("step name");
    std::string op_name = r.str("step op");
    st.op = OpRegistry::instance().find(op_name);
    KILN_CHECK(st.op, "engine file '", src, "': step #", i, " '", st.name, "' runs op '", op_name,
               "' which this kiln does not have (built by kiln ", e.kiln_version, "); recompile the model");
    Attrs given;
    size_t nattrs = r.count("step attributes", 5);
    for (size_t k = 0; k < nattrs; ++k) {
      std::string key = r.str("attribute name");
      given.set(key, r.attr("attribute value"));
    }
    try {
      st.attrs = st.op->bind_attrs(given);
    } catch (const Error& err) {
      KILN_FAIL("engine file '", src, "': step #", i, " '", st.name, "': ", err.what());
    }
    st.inputs = r.ids("step inputs");
    st.outputs = r.ids("step outputs");
    st.tactic = r.str("step tactic");
    st.small_tactic = r.str("step small-batch tactic");
    if (!st.small_tactic.empty()) st.small_batch_max = r.i64("step small-batch limit");
    e.steps.push_back(std::move(st));
  }
  e.inputs = r.ids("signature inputs");
  e.outputs = r.ids("signature outputs");
  size_t nin = r.count("input names", 4);
  for (size_t i = 0; i < nin; ++i) e.input_names.push_back(r.str("input name"));
  size_t nout = r.count("output names", 4);
  for (size_t i = 0; i < nout; ++i) e.output_names.push_back(r.str("output name"));
  KILN_CHECK(r.pos() == r.end(), "engine file '", src, "' is corrupt: ", r.end() - r.pos(),
             " unread bytes at the end of the metadata");
  try {
    e.validate();
  } catch (const Error& err) {
    KILN_FAIL("engine file '", src, "' is inconsistent: ", err.what());
  }
  return e;
}

}  // namespace kiln::runtime
