// libFuzzer target for the compile server's wire format (src/server/wire.hpp): any bytes given to
// decode_request, decode_reply and decode_raw_reply must decode or throw wire_error (or another
// cucore::error), never crash or throw anything else; whatever decodes re-encodes to exactly the
// bytes it came from, and that encoding decodes again to the same encoding. The same bytes, as a
// stream read from a socket, go through read_frame until it reports the end or throws, and each
// request or reply frame's payload (raw ones included) through the decoders as above.
//
// Seeds: with CUCORE_WIRE_FUZZ_SEEDS=DIR the target writes encodings of real requests and replies
// (bare payloads, raw replies, whole frames) into DIR and exits (.ci/run, stage fuzz). They are
// made by the encoder of the build, so they follow any change of the format.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "cucore/error.hpp"
#include "server/wire.hpp"

namespace {

using namespace cucore::server;
using namespace std::chrono_literals;

// The largest input also read as a frame stream: it is written whole into a socket pair before
// anything is read (well under the socket's buffer), so every read sees data or the end at once.
constexpr std::size_t kMaxStream = 64 << 10;

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "server_wire_fuzz: %s\n", what);
  std::abort();
}

template <class Decode>
void check_payload(std::string_view payload, Decode decode) {
  std::string first;
  try {
    auto decoded = decode(payload);
    first = encode(decoded);
    if constexpr (std::is_same_v<decltype(decoded), compile_request>) {
      (void)prefix_identity(decoded);  // the server routes every request it decodes by this
    }
  } catch (const wire_error&) {
    return;
  } catch (const cucore::error&) {
    return;
  }
  // A decoded value's encoding is the bytes it came from (the format has one encoding per value).
  if (first != payload) finding("a decoded payload re-encodes to other bytes");
  std::string second;
  try {
    second = encode(decode(first));
  } catch (const cucore::error& e) {
    std::fprintf(stderr, "server_wire_fuzz: %s\n", e.what());
    finding("a decoded payload's encoding does not decode");
  }
  if (second != first) finding("a decoded payload's encoding decodes to another encoding");
}

void check_request(std::string_view payload) {
  check_payload(payload, [](std::string_view p) { return decode_request(p); });
}
// The server's routing reads a reply's automatic-PCH status alone (auto_pch_of_reply): never a
// crash, and where the whole reply decodes, the status it decodes to.
template <class Decode>
void check_auto_pch_peek(frame_type type, std::string_view payload, Decode decode) {
  const auto peeked = auto_pch_of_reply(type, payload);
  try {
    if (decode(payload).auto_pch != peeked) finding("auto_pch_of_reply differs from the decode");
  } catch (const cucore::error&) {
  }
}

void check_reply(std::string_view payload) {
  check_payload(payload, [](std::string_view p) { return decode_reply(p); });
  check_auto_pch_peek(frame_type::compile_reply, payload,
                      [](std::string_view p) { return decode_reply(p); });
  try {
    if (decode_reply(payload).compiled != reply_succeeded(frame_type::compile_reply, payload)) {
      finding("reply_succeeded differs from the decode");
    }
  } catch (const cucore::error&) {
  }
}
void check_raw_reply(std::string_view payload) {
  check_payload(payload, [](std::string_view p) { return decode_raw_reply(p); });
  check_auto_pch_peek(frame_type::raw_compile_reply, payload,
                      [](std::string_view p) { return decode_raw_reply(p); });
  try {
    if ((decode_raw_reply(payload).result == NVRTC_SUCCESS) !=
        reply_succeeded(frame_type::raw_compile_reply, payload)) {
      finding("reply_succeeded differs from the decode");
    }
  } catch (const cucore::error&) {
  }
}

void check_stream(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxStream) return;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) finding("socketpair failed");
  const ssize_t written = size ? ::send(fds[1], data, size, MSG_NOSIGNAL) : 0;
  if (written != static_cast<ssize_t>(size)) finding("the input does not fit the socket");
  ::close(fds[1]);  // the reader sees the end after the input
  std::size_t left = size;
  for (;;) {
    // A header may claim up to kMaxPayload bytes, far past the input: read_frame grows its buffer
    // as bytes arrive (1 MiB at a time), so the claim costs what arrived, then the early end.
    std::optional<frame> f;
    try {
      f = read_frame(fds[0], 1s);
    } catch (const wire_error&) {
      break;
    } catch (const cucore::error&) {
      break;
    }
    if (!f) {
      if (left != 0) finding("read_frame reported the end before the input's end");
      break;
    }
    if (f->payload.size() + 16 > left) finding("read_frame returned more than the input held");
    left -= f->payload.size() + 16;
    switch (f->type) {
      case frame_type::compile_request:
      case frame_type::compile_request_make_image:
      case frame_type::raw_compile_request:  // a raw request's payload is a compile_request's
      case frame_type::raw_compile_request_make_image:
        check_request(f->payload);
        break;
      case frame_type::compile_reply:
        check_reply(f->payload);
        break;
      case frame_type::raw_compile_reply:
        check_raw_reply(f->payload);
        break;
      default:
        break;
    }
  }
  ::close(fds[0]);
}

// Seeds -------------------------------------------------------------------------------------------

compile_request full_request() {
  compile_request q;
  q.view.nvrtc_path = "/usr/local/cuda/lib64/libnvrtc.so.13";
  q.view.nvrtc_device = 66306;
  q.view.nvrtc_inode = 1234567;
  q.view.nvrtc_size = 104857600;
  q.view.nvrtc_mtime_ns = 1735689600123456789;
  q.view.working_directory = "/home/user/project";
  q.view.environment = {{"CUDA_HOME", "/usr/local/cuda"}, {"NVRTC_DISABLE_PCH", std::nullopt}};
  q.code =
      "#include <cuda_fp16.h>\n#include \"tuning.cuh\"\n"
      "template <int N> __global__ void scale(float* x) { x[threadIdx.x] *= N; }\n";
  q.options.name = "scale.cu";
  q.options.arch = "sm_90";
  q.options.relocatable_device_code = false;
  q.options.max_register_count = 64;
  q.options.define_macro = {"NDEBUG", {"BLOCK", "256"}};
  q.options.include_path = {"/home/user/project/include"};
  q.options.headers = {{"tuning.cuh", "#define TILE 16\n"}};
  q.options.std = "c++20";
  q.options.diag_suppress = {177, 550};
  q.options.auto_pch = true;
  q.options.extra_nvrtc_options = {"--extensible-whole-program"};
  q.target = cucore::code_type::cubin;
  q.name_expressions = {"scale<2>", "scale<4>"};
  q.flags = {"-arch=sm_90", "-std=c++20", "-DNDEBUG", "-DBLOCK=256"};
  return q;
}

compile_request minimal_request() {
  compile_request q;
  q.view.working_directory = "/";
  q.code = "__global__ void k() {}\n";
  return q;
}

compile_reply compiled_reply() {
  compile_reply a;
  a.compiled = true;
  a.log = "warning: variable \"x\" was declared but never referenced\n";
  a.auto_pch = cucore::auto_pch_status::no_prefix;
  a.pch = cucore::pch_status::created;
  a.target = cucore::code_type::cubin;
  a.code = std::string(
               "\x7f"
               "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
               16) +
           "code";
  a.name = "scale.cu";
  a.symbols = {"scale<2>", "_Z5scaleILi2EEvPf", "scale<4>", "_Z5scaleILi4EEvPf"};
  a.tile_ir = std::string("tile ir\0bytes", 13);
  a.observed.inputs = {{cucore::detail::observed_call::open, true, "/src/scale.cuh"},
                       {cucore::detail::observed_call::stat, false, "/src/scale.stdh"},
                       {cucore::detail::observed_call::getenv, false, "NVRTC_APPEND_FLAGS"}};
  return a;
}

compile_reply failed_reply() {
  compile_reply a;
  a.backend = "NVRTC";
  a.status = "NVRTC_ERROR_COMPILATION";
  a.log = "k.cu(1): error: identifier \"y\" is undefined\n";
  return a;
}

// A drop-in's compile as the worker answers it: every getter's answer, lowered names, Tile IR.
raw_compile_reply raw_reply_with_names() {
  raw_compile_reply a;
  a.result = NVRTC_SUCCESS;
  a.auto_pch = cucore::auto_pch_status::created;
  auto& r = a.record;
  const std::string ptx = ".version 9.0\n.target sm_90\n.address_size 64\n";
  r.ptx = {NVRTC_SUCCESS, ptx.size() + 1, NVRTC_SUCCESS, ptx + '\0'};
  const std::string cubin = "\177ELF" + std::string(4, '\0') + "cubin";
  r.cubin = {NVRTC_SUCCESS, cubin.size(), NVRTC_SUCCESS, cubin};
  r.ltoir = {NVRTC_ERROR_INVALID_PROGRAM, 0, NVRTC_ERROR_INVALID_PROGRAM, ""};
  r.optix = {NVRTC_ERROR_INVALID_PROGRAM, 0, NVRTC_ERROR_INVALID_PROGRAM, ""};
  r.log = {NVRTC_SUCCESS, 1, NVRTC_SUCCESS, std::string(1, '\0')};
  r.names = {{"scale<2>", NVRTC_SUCCESS, "_Z5scaleILi2EEvPf"},
             {"scale<4>", NVRTC_SUCCESS, "_Z5scaleILi4EEvPf"}};
  r.pch_status = NVRTC_SUCCESS;
  r.pch_required = 0;
  r.tile =
      cucore::detail::nvrtc_output{NVRTC_SUCCESS, 7, NVRTC_SUCCESS, std::string("tile\0ir", 7)};
  a.observed.unobserved = "NVRTC's imports could not be patched";
  a.observed.inputs = {{cucore::detail::observed_call::getcwd, true, ""}};
  return a;
}

// A drop-in's compile that NVRTC rejected: the log, no outputs, no names, no Tile IR getters.
raw_compile_reply raw_reply_failed() {
  raw_compile_reply a;
  a.result = NVRTC_ERROR_COMPILATION;
  auto& r = a.record;
  const std::string log = "k.cu(1): error: identifier \"y\" is undefined\n";
  for (auto* o : {&r.ptx, &r.cubin, &r.ltoir, &r.optix}) {
    *o = {NVRTC_ERROR_INVALID_PROGRAM, 0, NVRTC_ERROR_INVALID_PROGRAM, ""};
  }
  r.log = {NVRTC_SUCCESS, log.size() + 1, NVRTC_SUCCESS, log + '\0'};
  return a;
}

// The bytes write_frame puts on a socket for these frames.
std::string frames(const std::vector<std::pair<frame_type, std::string>>& list) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) finding("socketpair failed");
  for (const auto& [type, payload] : list) write_frame(fds[0], type, payload, 1s);
  ::close(fds[0]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[1], buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[1]);
  return out;
}

void write_seeds(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto put = [&](const char* name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
  };
  const std::string full = encode(full_request()), minimal = encode(minimal_request());
  const std::string compiled = encode(compiled_reply()), failed = encode(failed_reply());
  const std::string raw = encode(raw_reply_with_names()), raw_failed = encode(raw_reply_failed());
  // Every seed decodes (a seed the decoders refuse would start the fuzzer off the format).
  (void)decode_request(full), (void)decode_request(minimal);
  (void)decode_reply(compiled), (void)decode_reply(failed);
  if (decode_raw_reply(raw).record != raw_reply_with_names().record ||
      decode_raw_reply(raw_failed).record != raw_reply_failed().record) {
    finding("a raw reply seed does not decode to itself");
  }
  put("request-full", full);
  put("request-minimal", minimal);
  put("reply-compiled", compiled);
  put("reply-failed", failed);
  put("raw-reply-names-tile", raw);
  put("raw-reply-failed", raw_failed);
  // A client's side of a compile, and the server's.
  put("frames-client",
      frames({{frame_type::compile_request, full}, {frame_type::status_request, ""}}));
  put("frames-server", frames({{frame_type::heartbeat, ""},
                               {frame_type::heartbeat, ""},
                               {frame_type::compile_reply, compiled}}));
  put("frames-worker", frames({{frame_type::compile_request_make_image, minimal},
                               {frame_type::compile_reply, failed},
                               {frame_type::refusal, "the server is stopping"},
                               {frame_type::stop_request, ""},
                               {frame_type::stopping, ""}}));
  // `cucore run`'s drop-in as a client, and a worker's raw compile.
  put("frames-raw-client", frames({{frame_type::raw_compile_request, full},
                                   {frame_type::heartbeat, ""},
                                   {frame_type::raw_compile_reply, raw}}));
  put("frames-raw-worker", frames({{frame_type::raw_compile_request_make_image, minimal},
                                   {frame_type::raw_compile_reply, raw_failed}}));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("CUCORE_WIRE_FUZZ_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check_request(bytes);
  check_reply(bytes);
  check_raw_reply(bytes);
  check_stream(data, size);
  return 0;
}
