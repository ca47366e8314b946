// The compile server's wire format (docs/compile-server.md, "Protocol"): frames of a fixed header
// (magic, protocol version, type, payload length) and a payload of length-prefixed fields. Every
// read is bounded and checked: a malformed frame or payload is a wire_error, never a crash.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "observe/compiler_observer.hpp"
#include "server/nvrtc_record.hpp"

namespace cucore::server {

class wire_error : public error {
 public:
  using error::error;
};

inline constexpr std::uint32_t kMagic = 0x53435543;  // "CUCS"
// Bumped on any change of a frame or payload: a client and server of different versions never
// talk (the client compiles itself).
inline constexpr std::uint32_t kProtocolVersion = 3;  // 3: replies carry observed inputs
// The largest payload either side accepts (a request holds source and headers; a reply the code).
inline constexpr std::uint32_t kMaxPayload = 256u << 20;

enum class frame_type : std::uint32_t {
  compile_request = 1,
  compile_reply = 2,
  heartbeat = 3,  // the server is still compiling this request
  refusal = 4,    // the server will not compile it (payload: why); the client compiles itself
  status_request = 5,
  status_reply = 6,  // payload: JSON
  stop_request = 7,
  stopping = 8,
  // Server to worker only: a compile_request whose worker is to make the prefix's automatic-PCH
  // image now (the one worker the server chose for it); a plain compile_request makes none yet.
  compile_request_make_image = 9,
  // `cucore run`'s drop-in NVRTC: the program's own option list compiled as given (flags), every
  // getter's answer returned (raw_compile_reply). options carry the drop-in's reading of the flags,
  // for routing and automatic PCH only.
  raw_compile_request = 10,
  raw_compile_reply = 11,
  raw_compile_request_make_image = 12,  // server to worker, as compile_request_make_image
};

struct frame {
  frame_type type{};
  std::string payload;
};

// Writes one frame to a blocking or non-blocking socket, waiting at most `timeout` for room.
// Throws wire_error (a closed peer, a full socket past the timeout).
void write_frame(int fd, frame_type type, std::string_view payload,
                 std::chrono::milliseconds timeout);
// Reads one frame, waiting at most `timeout` between received bytes (and for the first one). Once
// the frame's first byte arrived, the whole frame must arrive within 2 x `timeout` plus 1 s per
// MiB received (at least 1 MiB/s on average): a trickling peer cannot hold a connection forever.
// The payload's buffer grows as bytes arrive (1 MiB at a time), not to the header's claim up front.
// nullopt: the peer closed before a frame began. Throws wire_error for silence past the timeout, a
// frame past its deadline, a wrong magic or version, an unknown type or an oversize length.
std::optional<frame> read_frame(int fd, std::chrono::milliseconds timeout);

// Payload fields.
class writer {
 public:
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void str(std::string_view s);
  void strings(std::span<const std::string> v);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class reader {
 public:
  explicit reader(std::string_view in) : in_(in) {}
  std::uint32_t u32();
  std::uint64_t u64();
  std::string str();
  std::vector<std::string> strings();
  bool boolean();
  // Throws wire_error unless every byte was read.
  void finish() const;

 private:
  std::string_view take(std::size_t n);
  std::string_view in_;
  std::size_t pos_ = 0;
};

// Every program_options field but compile_server and verify (neither changes an output), in a
// fixed order; also what a cache's recipes hold (verify/program_recipes.hpp). A field added to
// program_options changes this encoding: readers of an older one fail with wire_error.
void put_options(writer& w, const program_options& o);
void get_options(reader& r, program_options& o);

// What a compile depends on besides its inputs, as the client sees it.
struct client_view {
  std::string nvrtc_path;  // the NVRTC library the client loaded (canonical path)
  std::uint64_t nvrtc_device = 0, nvrtc_inode = 0, nvrtc_size = 0;
  std::int64_t nvrtc_mtime_ns = 0;
  std::string working_directory;
  // Every variable of the compilers' table (observe/compiler_variables.hpp): set or not, and value.
  std::vector<std::pair<std::string, std::optional<std::string>>> environment;
  friend bool operator==(const client_view&, const client_view&) = default;
};

struct compile_request {
  client_view view;
  std::string code;
  program_options options;  // compile_server off
  code_type target = code_type::ptx;
  std::vector<std::string> name_expressions;
  std::vector<std::string> flags;  // compiler_flags() in the client: the worker checks its own
};

struct compile_reply {
  bool compiled = false;        // false: NVRTC rejected the code (compile_error)
  std::string backend, status;  // of the compile_error
  std::string log;
  auto_pch_status auto_pch = auto_pch_status::off;
  pch_status pch = pch_status::not_requested;
  code_type target = code_type::ptx;
  std::string code, name;
  std::vector<std::string> symbols;  // expression, lowered, ...
  std::optional<std::string> tile_ir;
  // What the worker's compile read (absolute paths): the client's store gate checks them against
  // its key. A compile that read its worker's own view (first_process_view_input) is refused.
  detail::observed_inputs observed;
};

// A raw request's answer: nvrtcCompileProgram's result and every getter's answer after it, as
// in-process (a plain compile's PCH answers, whatever automatic PCH the worker used).
struct raw_compile_reply {
  std::int32_t result = 0;
  detail::nvrtc_record record;
  auto_pch_status auto_pch = auto_pch_status::off;
  detail::observed_inputs observed;  // as compile_reply's
};

std::string encode(const compile_request& r);
compile_request decode_request(std::string_view payload);
std::string encode(const compile_reply& r);
compile_reply decode_reply(std::string_view payload);
std::string encode(const raw_compile_reply& r);
raw_compile_reply decode_raw_reply(std::string_view payload);
// The automatic-PCH status a compile_reply or raw_compile_reply payload carries, read without
// decoding the rest (the server's routing); nullopt when it cannot be read.
std::optional<auto_pch_status> auto_pch_of_reply(frame_type type, std::string_view payload);
// Whether a compile_reply or raw_compile_reply payload is a compile that succeeded, read as above
// (false when it cannot be read).
bool reply_succeeded(frame_type type, std::string_view payload);

// What routes a request to a worker: the program's leading preprocessing lines (automatic PCH's
// prefix), the flags and what of the name an image may depend on (detail::pch_program_name);
// empty when the code has no such prefix.
std::string prefix_identity(const compile_request& r);

}  // namespace cucore::server
