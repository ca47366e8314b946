#include "server/wire.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/sha256.hpp"
#include "pch/pch_prefix.hpp"

namespace cucore::server {
namespace {

using clock = std::chrono::steady_clock;

// Waits for `events` on fd until `deadline`; throws wire_error past it.
void wait_for(int fd, short events, clock::time_point deadline, const char* what) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) throw wire_error(std::string("timed out ") + what);
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (r > 0) return;  // ready, or an error/hang-up the next call reports
    if (r < 0 && errno != EINTR) throw wire_error(std::string("poll: ") + std::strerror(errno));
  }
}

// A frame's payload is read in pieces of at most this size, the buffer grown as they arrive: a
// header alone (which may claim kMaxPayload) costs nothing, memory follows what the peer sent.
constexpr std::size_t kReadChunk = 1u << 20;
// The least average rate a peer sends a frame at (bytes per second), past the grace below.
constexpr std::uint64_t kMinFrameRate = 1u << 20;

// The reading of one frame. Two bounds apply:
// - silence: at most `timeout` between received bytes (and before the first one: an idle worker
//   waits 24 h for its next request's first byte);
// - the whole frame: from its first byte, at most 2 x `timeout` plus 1 s per MiB received so far.
//   A peer must send at 1 MiB/s on average, after a grace of twice the silence bound, or the frame
//   is abandoned: one byte every few seconds no longer holds a connection (and a slot of the
//   server's) forever, and since the bound grows only with what arrived, claiming a large payload
//   buys no time. A real peer writes a frame in one write_frame call, at the speed of a Unix
//   socket (hundreds of MiB/s: a 64 MiB reply takes tens of ms), far inside the bound.
class frame_reader {
 public:
  frame_reader(int fd, std::chrono::milliseconds timeout) : fd_(fd), timeout_(timeout) {}

  // Reads exactly n bytes. Returns false when the peer closed before the frame's first byte and
  // `eof_ok`; throws wire_error for anything else short.
  bool read(char* out, std::size_t n, bool eof_ok) {
    std::size_t got = 0;
    auto silence = clock::now() + timeout_;
    while (got < n) {
      const ssize_t r = ::recv(fd_, out + got, n - got, MSG_DONTWAIT);
      if (r > 0) {
        const auto now = clock::now();
        if (received_ == 0) started_ = now;
        got += static_cast<std::size_t>(r);
        received_ += static_cast<std::size_t>(r);
        silence = now + timeout_;
        continue;
      }
      if (r == 0) {
        if (received_ == 0 && eof_ok) return false;
        throw wire_error("the peer closed the connection inside a frame");
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        if (received_ == 0 && eof_ok && errno == ECONNRESET) return false;
        throw wire_error(std::string("recv: ") + std::strerror(errno));
      }
      if (received_ > 0 && frame_deadline() < silence) {
        wait_for(fd_, POLLIN, frame_deadline(), "waiting for the rest of a frame (too slow)");
      } else {
        wait_for(fd_, POLLIN, silence, "waiting for the peer");
      }
    }
    return true;
  }

 private:
  clock::time_point frame_deadline() const {
    // 1 s per MiB received: at most 257 s (kMaxPayload and a header; no overflow in the product).
    const auto earned = std::chrono::microseconds(
        static_cast<std::int64_t>(std::uint64_t{received_} * 1'000'000 / kMinFrameRate));
    return started_ + 2 * timeout_ + earned;
  }

  int fd_;
  std::chrono::milliseconds timeout_;
  clock::time_point started_{};
  std::size_t received_ = 0;
};

void put32(char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint32_t get32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

}  // namespace

void write_frame(int fd, frame_type type, std::string_view payload,
                 std::chrono::milliseconds timeout) {
  if (payload.size() > kMaxPayload) throw wire_error("a frame's payload is over the limit");
  std::string out(16, '\0');
  put32(out.data(), kMagic);
  put32(out.data() + 4, kProtocolVersion);
  put32(out.data() + 8, static_cast<std::uint32_t>(type));
  put32(out.data() + 12, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  std::size_t sent = 0;
  auto deadline = clock::now() + timeout;
  while (sent < out.size()) {
    const ssize_t r = ::send(fd, out.data() + sent, out.size() - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r > 0) {
      sent += static_cast<std::size_t>(r);
      deadline = clock::now() + timeout;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_for(fd, POLLOUT, deadline, "waiting for room on the socket");
      continue;
    }
    throw wire_error(std::string("send: ") + std::strerror(errno));
  }
}

std::optional<frame> read_frame(int fd, std::chrono::milliseconds timeout) {
  frame_reader in(fd, timeout);
  char header[16];
  if (!in.read(header, sizeof header, true)) return std::nullopt;
  if (get32(header) != kMagic) throw wire_error("not a cucore compile server frame");
  if (get32(header + 4) != kProtocolVersion) {
    throw wire_error("protocol version " + std::to_string(get32(header + 4)) + ", expected " +
                     std::to_string(kProtocolVersion));
  }
  const std::uint32_t type = get32(header + 8);
  if (type < 1 || type > 12) throw wire_error("unknown frame type " + std::to_string(type));
  const std::uint32_t length = get32(header + 12);
  if (length > kMaxPayload) throw wire_error("a frame's payload is over the limit");
  frame f;
  f.type = static_cast<frame_type>(type);
  // Grown as the payload arrives (the string's capacity doubles: amortized linear copying).
  while (f.payload.size() < length) {
    const std::size_t at = f.payload.size();
    const std::size_t piece = std::min<std::size_t>(length - at, kReadChunk);
    f.payload.resize(at + piece);
    in.read(f.payload.data() + at, piece, false);
  }
  return f;
}

void writer::u32(std::uint32_t v) {
  char b[4];
  put32(b, v);
  out_.append(b, 4);
}
void writer::u64(std::uint64_t v) {
  u32(static_cast<std::uint32_t>(v));
  u32(static_cast<std::uint32_t>(v >> 32));
}
void writer::str(std::string_view s) {
  u64(s.size());
  out_.append(s);
}
void writer::strings(std::span<const std::string> v) {
  u32(static_cast<std::uint32_t>(v.size()));
  for (const auto& s : v) str(s);
}

std::string_view reader::take(std::size_t n) {
  if (n > in_.size() - pos_) throw wire_error("a payload field runs past the end of its frame");
  auto out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}
std::uint32_t reader::u32() {
  return get32(take(4).data());
}
std::uint64_t reader::u64() {
  const std::uint64_t lo = u32();
  return lo | (static_cast<std::uint64_t>(u32()) << 32);
}
std::string reader::str() {
  const std::uint64_t n = u64();
  if (n > in_.size() - pos_) throw wire_error("a payload field runs past the end of its frame");
  return std::string(take(static_cast<std::size_t>(n)));
}
std::vector<std::string> reader::strings() {
  const std::uint32_t n = u32();
  // Each element takes 8 bytes at least: a count the payload cannot hold is refused up front.
  if (n > (in_.size() - pos_) / 8) throw wire_error("a list is longer than its frame");
  std::vector<std::string> v;
  v.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) v.push_back(str());
  return v;
}
bool reader::boolean() {
  const std::uint32_t v = u32();
  if (v > 1) throw wire_error("a boolean field is neither 0 nor 1");
  return v == 1;
}
void reader::finish() const {
  if (pos_ != in_.size()) throw wire_error("a payload has bytes after its last field");
}

namespace {

// program_options, field by field: each type once, the fields listed once.
void put(writer& w, const std::string& v) {
  w.str(v);
}
void get(reader& r, std::string& v) {
  v = r.str();
}
void put(writer& w, bool v) {
  w.u32(v ? 1 : 0);
}
void get(reader& r, bool& v) {
  v = r.boolean();
}
void put(writer& w, int v) {
  w.u32(static_cast<std::uint32_t>(v));
}
void get(reader& r, int& v) {
  v = static_cast<int>(r.u32());
}
void put(writer& w, const macro& m) {
  put(w, m.name);
  put(w, m.value.has_value());
  if (m.value) put(w, *m.value);
}
void get(reader& r, macro& m) {
  m.name = r.str();
  if (r.boolean()) m.value = r.str();
}
void put(writer& w, const include_header& h) {
  put(w, h.name);
  put(w, h.contents);
}
void get(reader& r, include_header& h) {
  h.name = r.str();
  h.contents = r.str();
}
void put(writer& w, const nvvm_module& m) {
  put(w, m.name);
  put(w, m.code);
}
void get(reader& r, nvvm_module& m) {
  m.name = r.str();
  m.code = r.str();
}
template <class T>
void put(writer& w, const std::optional<T>& v) {
  put(w, v.has_value());
  if (v) put(w, *v);
}
template <class T>
void get(reader& r, std::optional<T>& v) {
  if (r.boolean()) {
    T t{};
    get(r, t);
    v = std::move(t);
  } else {
    v.reset();
  }
}
template <class T>
void put(writer& w, const std::vector<T>& v) {
  w.u32(static_cast<std::uint32_t>(v.size()));
  for (const auto& e : v) put(w, e);
}
template <class T>
void get(reader& r, std::vector<T>& v) {
  const std::uint32_t n = r.u32();
  v.clear();
  // Bounded by the payload: every element takes 4 bytes at least.
  for (std::uint32_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, macro>) {
      macro m("");
      get(r, m);
      v.push_back(std::move(m));
    } else {
      T t{};
      get(r, t);
      v.push_back(std::move(t));
    }
  }
}

// Every field but compile_server (a worker compiles in-process), verify and verify_in_background
// (the client checks its own hits). A field added to
// program_options must be added here: the static_assert below fails until it is.
// Not formatted: clang-format 14 lays this list out differently on every run.
// clang-format off
#define CUCORE_SERVER_OPTION_FIELDS(X)                                                             \
  X(name)                                                                                          \
  X(arch)                                                                                          \
  X(relocatable_device_code)                                                                       \
  X(extensible_whole_program)                                                                      \
  X(debug) X(lineinfo) X(device_code_optimize) X(ptxas_options) X(max_register_count) X(ftz)       \
      X(prec_sqrt) X(prec_div) X(fma) X(use_fast_math) X(extra_device_vectorization) X(            \
          link_time_optimization) X(gen_opt_lto) X(define_macro) X(undefine_macro) X(include_path) \
          X(pre_include) X(no_source_include) X(toolkit_include_path) X(use_bundled_headers)       \
              X(headers) X(std) X(builtin_move_forward) X(builtin_initializer_list)                \
                  X(disable_warnings) X(restrict) X(device_as_default_execution_space)             \
                      X(device_int128) X(device_float128) X(optimization_info)                     \
                          X(no_display_error_number) X(diag_error) X(diag_suppress) X(diag_warn)   \
                              X(brief_diagnostics) X(time) X(split_compile) X(fdevice_syntax_only) \
                                  X(minimal) X(no_cache) X(fdevice_time_trace) X(frandom_seed)     \
                                      X(ofast_compile) X(pch) X(create_pch) X(use_pch) X(pch_dir)  \
                                          X(pch_verbose) X(pch_messages)                           \
                                              X(instantiate_templates_in_pch) X(auto_pch)          \
                                                  X(extra_sources) X(use_libdevice) X(numba_debug) \
                                                      X(warning_as_error) X(wreorder)              \
                                                          X(enable_tile) X(tile_only) X(simt_only) \
                                                              X(default_tile)                      \
                                                                  X(diagnose_implicit_tile_var)    \
                                                                      X(extra_nvrtc_options)
// clang-format on

#define CUCORE_SERVER_PUT(field) put(w, o.field);
#define CUCORE_SERVER_GET(field) get(r, o.field);
#if defined(__x86_64__) && defined(__GLIBCXX__) && !defined(_GLIBCXX_DEBUG)
// 68 fields, compile_server, verify and verify_in_background, as laid out by libstdc++ on x86-64.
static_assert(sizeof(program_options) == 888,
              "program_options changed: list the new field in CUCORE_SERVER_OPTION_FIELDS (and "
              "bump kProtocolVersion), then update this size");
#endif

}  // namespace

void put_options(writer& w, const program_options& o) {
  CUCORE_SERVER_OPTION_FIELDS(CUCORE_SERVER_PUT)
}
void get_options(reader& r, program_options& o) {
  CUCORE_SERVER_OPTION_FIELDS(CUCORE_SERVER_GET)
}

namespace {

std::uint32_t checked_enum(reader& r, std::uint32_t last, const char* what) {
  const std::uint32_t v = r.u32();
  if (v > last) throw wire_error(std::string("an unknown ") + what);
  return v;
}

}  // namespace

std::string encode(const compile_request& q) {
  writer w;
  w.str(q.view.nvrtc_path);
  w.u64(q.view.nvrtc_device);
  w.u64(q.view.nvrtc_inode);
  w.u64(q.view.nvrtc_size);
  w.u64(static_cast<std::uint64_t>(q.view.nvrtc_mtime_ns));
  w.str(q.view.working_directory);
  w.u32(static_cast<std::uint32_t>(q.view.environment.size()));
  for (const auto& [name, value] : q.view.environment) {
    w.str(name);
    put(w, value);
  }
  w.str(q.code);
  put_options(w, q.options);
  w.u32(static_cast<std::uint32_t>(q.target));
  w.strings(q.name_expressions);
  w.strings(q.flags);
  return w.take();
}

compile_request decode_request(std::string_view payload) {
  reader r(payload);
  compile_request q;
  q.view.nvrtc_path = r.str();
  q.view.nvrtc_device = r.u64();
  q.view.nvrtc_inode = r.u64();
  q.view.nvrtc_size = r.u64();
  q.view.nvrtc_mtime_ns = static_cast<std::int64_t>(r.u64());
  q.view.working_directory = r.str();
  const std::uint32_t n = r.u32();
  if (n > 1024) throw wire_error("too many environment variables");
  for (std::uint32_t i = 0; i < n; ++i) {
    std::string name = r.str();
    std::optional<std::string> value;
    get(r, value);
    if (name.empty() || name.find('=') != std::string::npos ||
        name.find('\0') != std::string::npos || (value && value->find('\0') != std::string::npos)) {
      throw wire_error("an environment variable's name or value is malformed");
    }
    q.view.environment.emplace_back(std::move(name), std::move(value));
  }
  q.code = r.str();
  get_options(r, q.options);
  q.target = static_cast<code_type>(
      checked_enum(r, static_cast<std::uint32_t>(code_type::tile_ir), "target"));
  q.name_expressions = r.strings();
  q.flags = r.strings();
  r.finish();
  if (q.code.empty() || q.code.find('\0') != std::string::npos) {
    throw wire_error("the source is empty or holds a NUL byte");
  }
  if (q.view.working_directory.empty() || q.view.working_directory.front() != '/') {
    throw wire_error("the working directory is not an absolute path");
  }
  return q;
}

namespace {

void put_observed(writer& w, const detail::observed_inputs& seen) {
  w.str(seen.unobserved);
  w.u32(static_cast<std::uint32_t>(seen.inputs.size()));
  for (const auto& in : seen.inputs) {
    w.u32(static_cast<std::uint32_t>(in.call));
    w.u32(in.found ? 1 : 0);
    w.str(in.name);
  }
}

detail::observed_inputs get_observed(reader& r) {
  detail::observed_inputs seen;
  seen.unobserved = r.str();
  const std::uint32_t n = r.u32();
  for (std::uint32_t i = 0; i < n; ++i) {  // bounded by the payload: each takes 12 bytes at least
    detail::observed_input in;
    in.call = static_cast<detail::observed_call>(
        checked_enum(r, static_cast<std::uint32_t>(detail::observed_call::clock), "observed call"));
    in.found = r.boolean();
    in.name = r.str();
    seen.inputs.push_back(std::move(in));
  }
  return seen;
}

}  // namespace

std::string encode(const compile_reply& a) {
  writer w;
  put(w, a.compiled);
  w.str(a.backend);
  w.str(a.status);
  w.str(a.log);
  w.u32(static_cast<std::uint32_t>(a.auto_pch));
  w.u32(static_cast<std::uint32_t>(a.pch));
  w.u32(static_cast<std::uint32_t>(a.target));
  w.str(a.code);
  w.str(a.name);
  w.strings(a.symbols);
  put(w, a.tile_ir);
  put_observed(w, a.observed);
  return w.take();
}

compile_reply decode_reply(std::string_view payload) {
  reader r(payload);
  compile_reply a;
  a.compiled = r.boolean();
  a.backend = r.str();
  a.status = r.str();
  a.log = r.str();
  a.auto_pch = static_cast<auto_pch_status>(checked_enum(
      r, static_cast<std::uint32_t>(auto_pch_status::discarded), "automatic PCH status"));
  a.pch = static_cast<pch_status>(
      checked_enum(r, static_cast<std::uint32_t>(pch_status::failed), "PCH status"));
  a.target = static_cast<code_type>(
      checked_enum(r, static_cast<std::uint32_t>(code_type::tile_ir), "target"));
  a.code = r.str();
  a.name = r.str();
  a.symbols = r.strings();
  if (a.symbols.size() % 2 != 0) throw wire_error("a symbol without its lowered name");
  get(r, a.tile_ir);
  a.observed = get_observed(r);
  r.finish();
  return a;
}

namespace {

// nvrtcResult is an unscoped enum without a fixed underlying type: holding a value outside its
// range (the smallest bit-field that holds its enumerators: 0..31 for CUDA 13's 0..17) is
// undefined behaviour, so a code past it is refused (the client then compiles itself).
static_assert(NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED >= 16 &&
                  NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED <= 31,
              "nvrtcResult's range changed: update the bound below");
nvrtcResult nvrtc_code(reader& r) {
  return static_cast<nvrtcResult>(checked_enum(r, 31, "NVRTC result code"));
}

void put_output(writer& w, const detail::nvrtc_output& o) {
  w.u32(static_cast<std::uint32_t>(o.size_code));
  w.u64(o.size);
  w.u32(static_cast<std::uint32_t>(o.get_code));
  w.str(o.bytes);
}

detail::nvrtc_output get_output(reader& r) {
  detail::nvrtc_output o;
  o.size_code = nvrtc_code(r);
  o.size = static_cast<std::size_t>(r.u64());
  o.get_code = nvrtc_code(r);
  o.bytes = r.str();
  // The client copies `bytes` into a buffer of `size` bytes the program allocated.
  if (o.get_code == NVRTC_SUCCESS && o.bytes.size() != o.size) {
    throw wire_error("an output's size differs from its bytes");
  }
  return o;
}

}  // namespace

std::string encode(const raw_compile_reply& a) {
  writer w;
  w.u32(static_cast<std::uint32_t>(a.result));
  w.u32(static_cast<std::uint32_t>(a.auto_pch));
  const auto& rec = a.record;
  for (const auto* o : {&rec.ptx, &rec.cubin, &rec.ltoir, &rec.optix, &rec.log}) put_output(w, *o);
  w.u32(static_cast<std::uint32_t>(rec.names.size()));
  for (const auto& n : rec.names) {
    w.str(n.expression);
    w.u32(static_cast<std::uint32_t>(n.code));
    w.str(n.name);
  }
  w.u32(static_cast<std::uint32_t>(rec.unknown_name_code));
  w.u32(static_cast<std::uint32_t>(rec.add_after_code));
  w.u32(static_cast<std::uint32_t>(rec.pch_status));
  w.u32(static_cast<std::uint32_t>(rec.pch_required_code));
  w.u64(rec.pch_required);
  put(w, rec.tile.has_value());
  if (rec.tile) put_output(w, *rec.tile);
  put_observed(w, a.observed);
  return w.take();
}

raw_compile_reply decode_raw_reply(std::string_view payload) {
  reader r(payload);
  raw_compile_reply a;
  a.result = nvrtc_code(r);
  a.auto_pch = static_cast<auto_pch_status>(checked_enum(
      r, static_cast<std::uint32_t>(auto_pch_status::discarded), "automatic PCH status"));
  auto& rec = a.record;
  for (auto* o : {&rec.ptx, &rec.cubin, &rec.ltoir, &rec.optix, &rec.log}) *o = get_output(r);
  const std::uint32_t n = r.u32();
  for (std::uint32_t i = 0; i < n; ++i) {  // bounded by the payload: each takes 12 bytes at least
    detail::nvrtc_lowered_name name;
    name.expression = r.str();
    name.code = nvrtc_code(r);
    name.name = r.str();
    rec.names.push_back(std::move(name));
  }
  rec.unknown_name_code = nvrtc_code(r);
  rec.add_after_code = nvrtc_code(r);
  rec.pch_status = nvrtc_code(r);
  rec.pch_required_code = nvrtc_code(r);
  rec.pch_required = static_cast<std::size_t>(r.u64());
  if (r.boolean()) rec.tile = get_output(r);
  a.observed = get_observed(r);
  r.finish();
  return a;
}

std::optional<auto_pch_status> auto_pch_of_reply(frame_type type, std::string_view payload) {
  try {
    reader r(payload);
    if (type == frame_type::compile_reply) {
      (void)r.boolean();  // compiled
      (void)r.str();      // backend
      (void)r.str();      // status
      (void)r.str();      // log
    } else if (type == frame_type::raw_compile_reply) {
      (void)r.u32();  // nvrtcCompileProgram's result
    } else {
      return std::nullopt;
    }
    return static_cast<auto_pch_status>(checked_enum(
        r, static_cast<std::uint32_t>(auto_pch_status::discarded), "automatic PCH status"));
  } catch (const wire_error&) {
    return std::nullopt;
  }
}

bool reply_succeeded(frame_type type, std::string_view payload) {
  try {
    reader r(payload);
    if (type == frame_type::compile_reply) return r.boolean();
    if (type == frame_type::raw_compile_reply) return r.u32() == NVRTC_SUCCESS;
  } catch (const wire_error&) {
  }
  return false;
}

std::string prefix_identity(const compile_request& q) {
  const auto prefix = detail::scan_pch_prefix(q.code);
  if (!prefix.balanced || !prefix.includes) return {};
  const std::string_view text = std::string_view(q.code).substr(0, prefix.end);
  std::string all(text);
  for (const auto& f : q.flags) (all += '\0') += f;
  // What of the name an image may depend on: other files of a prefix go to its image's worker.
  (all += '\0') += detail::pch_program_name(text, q.options.name);
  (all += '\0') += q.view.working_directory;
  const auto hex = detail::sha256_hex(std::as_bytes(std::span(all.data(), all.size())));
  return std::string(hex.data(), hex.size());
}

}  // namespace cucore::server
