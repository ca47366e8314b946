// The compile server's wire format (src/server/wire.hpp), over socket pairs: no server.
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "server/wire.hpp"

namespace cucore {
namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// A socket pair, closed at the end of the test (an end closed early is set to -1).
struct socket_pair {
  int fd[2] = {-1, -1};
  socket_pair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fd), 0); }
  ~socket_pair() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  void close(int i) {
    ::close(fd[i]);
    fd[i] = -1;
  }
};

std::string frame_header(server::frame_type type, std::uint32_t length) {
  std::string h(16, '\0');
  const std::uint32_t v[4] = {server::kMagic, server::kProtocolVersion,
                              static_cast<std::uint32_t>(type), length};
  std::memcpy(h.data(), v, 16);  // little-endian, as the format (x86-64, aarch64)
  return h;
}

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Runs `body` in a child process and returns {what it returned, the growth of the child's peak RSS
// (ru_maxrss, KiB) across it}. A child's peak starts at what it holds at the fork, whatever this
// test process reached before (the 64 MiB round trip below, another test).
template <class Body>
std::pair<long, long> in_child_peak_growth(Body body) {
  int report[2];
  if (::pipe(report) != 0) return {-1, -1};
  const pid_t child = ::fork();
  if (child < 0) return {-1, -1};
  if (child == 0) {
    ::close(report[0]);
    long out[2] = {-1, -1};
    const long before = max_rss_kib();
    out[0] = body();
    out[1] = max_rss_kib() - before;
    (void)!::write(report[1], out, sizeof out);
    ::_exit(0);
  }
  ::close(report[1]);
  long got[2] = {-1, -1};
  const ssize_t n = ::read(report[0], got, sizeof got);
  ::close(report[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (n != static_cast<ssize_t>(sizeof got)) return {-1, -1};
  return {got[0], got[1]};
}

TEST(Wire, AHeaderClaimingMoreThanArrivesCostsOnlyWhatArrived) {
  // A header claiming 200 MiB, 10 bytes of payload, and the peer closes: read_frame throws
  // wire_error, and the peak RSS grew by far less than the claim (it grew by all of it when
  // read_frame sized the buffer from the header).
  const auto [threw, growth] = in_child_peak_growth([]() -> long {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return -2;
    const std::string sent =
        frame_header(server::frame_type::compile_request, 200u << 20) + "0123456789";
    if (::send(fds[1], sent.data(), sent.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(sent.size())) {
      return -3;
    }
    ::close(fds[1]);
    try {
      (void)server::read_frame(fds[0], 5s);
    } catch (const server::wire_error&) {
      return 1;
    } catch (...) {
      return -4;
    }
    return 0;
  });
  EXPECT_EQ(threw, 1) << "read_frame did not throw wire_error for a frame cut short";
  EXPECT_LT(growth, 50 * 1024) << "reading 10 bytes of a 200 MiB claim grew the peak RSS by "
                               << growth << " KiB";
  // The control: the measure sees an allocation of 64 MiB here (touched page by page).
  const auto [ok, control] = in_child_peak_growth([]() -> long {
    std::vector<char> touched(64u << 20);
    for (std::size_t i = 0; i < touched.size(); i += 4096) touched[i] = 1;
    return touched[4096];
  });
  EXPECT_EQ(ok, 1);
  EXPECT_GE(control, 60 * 1024) << "touching 64 MiB grew the peak RSS by " << control
                                << " KiB only: the measure does not see allocations here";
}

TEST(Wire, ATricklingPeerIsCutOffByTheFrameDeadline) {
  // The header at once, then one payload byte every 300 ms: never 1 s of silence, but the frame's
  // deadline is 2 x 1 s after its first byte (plus 1 s per MiB received: nothing here). Before
  // the deadline, the 100 bytes would have held the reader for 30 s.
  socket_pair s;
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    const std::string h = frame_header(server::frame_type::compile_request, 100);
    if (::send(s.fd[1], h.data(), h.size(), MSG_NOSIGNAL) != 16) return;
    for (int i = 0; i < 100 && !stop; ++i) {
      std::this_thread::sleep_for(300ms);
      if (::send(s.fd[1], "x", 1, MSG_NOSIGNAL) != 1) return;
    }
  });
  const auto start = clock_type::now();
  std::string what;
  try {
    (void)server::read_frame(s.fd[0], 1s);
  } catch (const server::wire_error& e) {
    what = e.what();
  }
  const auto took = clock_type::now() - start;
  stop = true;
  peer.join();
  EXPECT_NE(what.find("timed out"), std::string::npos) << "read_frame did not time out: " << what;
  EXPECT_GE(took, 1900ms);
  EXPECT_LT(took, 3500ms) << "the trickling peer held the reader past the frame's deadline";
}

TEST(Wire, TheFrameDeadlineStartsAtItsFirstByte) {
  // An idle wait (a worker's 24 h for its next request) is bounded by the silence bound alone:
  // 900 ms of nothing, then a frame in pieces 300 ms apart for 1.5 s, 2.4 s after the call, 1.5 s
  // after the frame's first byte (its deadline: 2 s).
  socket_pair s;
  const std::string bytes =
      frame_header(server::frame_type::compile_reply, 10) + std::string("0123456789");
  std::thread peer([&] {
    std::this_thread::sleep_for(900ms);
    for (std::size_t at = 0; at < bytes.size(); at += 5) {
      if (at > 0) std::this_thread::sleep_for(300ms);
      const std::size_t n = std::min<std::size_t>(5, bytes.size() - at);
      if (::send(s.fd[1], bytes.data() + at, n, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) return;
    }
  });
  std::optional<server::frame> f;
  EXPECT_NO_THROW(f = server::read_frame(s.fd[0], 1s));
  peer.join();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, server::frame_type::compile_reply);
  EXPECT_EQ(f->payload, "0123456789");
}

TEST(Wire, A64MiBPayloadRoundTrips) {
  socket_pair s;
  std::string payload(64u << 20, '\0');
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i + 8 <= payload.size(); i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(payload.data() + i, &v, 8);
  }
  std::string write_error;
  std::thread peer([&] {
    try {
      server::write_frame(s.fd[1], server::frame_type::compile_reply, payload, 5s);
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  });
  const auto start = clock_type::now();
  std::optional<server::frame> f;
  EXPECT_NO_THROW(f = server::read_frame(s.fd[0], 5s));
  const auto took = clock_type::now() - start;
  peer.join();
  EXPECT_EQ(write_error, "");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->type, server::frame_type::compile_reply);
  EXPECT_TRUE(f->payload == payload)
      << "the payload arrived changed (" << f->payload.size() << " bytes)";
  EXPECT_LT(took, 5s);
  // The peer closes: the end, not an error.
  s.close(1);
  EXPECT_FALSE(server::read_frame(s.fd[0], 1s));
}

TEST(Wire, RawCompileRepliesRoundTrip) {
  server::raw_compile_reply full;
  full.result = 6;  // NVRTC_ERROR_COMPILATION: any nvrtcResult travels
  full.auto_pch = auto_pch_status::created;
  auto& r = full.record;
  r.ptx = {NVRTC_SUCCESS, 12, NVRTC_SUCCESS, std::string(".version 9\0", 11) + "."};
  r.cubin = {NVRTC_ERROR_INVALID_PROGRAM, 0, NVRTC_ERROR_INVALID_PROGRAM, ""};
  r.ltoir = {NVRTC_SUCCESS, 3, NVRTC_SUCCESS, std::string("\0\1\2", 3)};
  r.log = {NVRTC_SUCCESS, 5, NVRTC_SUCCESS, "log\n"};
  r.log.bytes += '\0';
  r.names = {{"k<1>", NVRTC_SUCCESS, "_Z1kILi1EEvv"},
             {"k<2>", NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID, ""}};
  r.pch_status = NVRTC_SUCCESS;
  r.pch_required = 1u << 30;
  r.tile = detail::nvrtc_output{NVRTC_SUCCESS, 4, NVRTC_SUCCESS, "tile"};
  server::raw_compile_reply bare;  // no names, no Tile IR
  for (const auto* a : {&full, &bare}) {
    const std::string bytes = server::encode(*a);
    const auto b = server::decode_raw_reply(bytes);
    EXPECT_EQ(b.result, a->result);
    EXPECT_EQ(b.auto_pch, a->auto_pch);
    EXPECT_TRUE(b.record == a->record);
    EXPECT_EQ(server::encode(b), bytes);
  }
  EXPECT_FALSE(server::decode_raw_reply(server::encode(bare)).record.tile);
  // An output whose size differs from its bytes is refused (the client copies `size` bytes).
  auto bad = full;
  bad.record.ptx.size = 99;
  EXPECT_THROW(server::decode_raw_reply(server::encode(bad)), server::wire_error);
  // A code outside nvrtcResult's range (0..31) is refused, not held (undefined behaviour).
  std::string bytes = server::encode(full);
  bytes[8] = 32;  // result and auto_pch (4 bytes each), then the PTX's size code
  EXPECT_THROW(server::decode_raw_reply(bytes), server::wire_error);
  bytes[8] = 31;
  EXPECT_EQ(static_cast<int>(server::decode_raw_reply(bytes).record.ptx.size_code), 31);
}

TEST(Wire, ObservedInputsRoundTripInBothReplies) {
  detail::observed_inputs seen;
  seen.inputs = {{detail::observed_call::open, true, "/a/b.h"},
                 {detail::observed_call::stat, false, "/a/c.stdh"},
                 {detail::observed_call::getenv, false, "NVRTC_APPEND_FLAGS"}};
  server::compile_reply a;
  a.observed = seen;
  const std::string bytes = server::encode(a);
  EXPECT_TRUE(server::decode_reply(bytes).observed.inputs == seen.inputs);
  EXPECT_EQ(server::encode(server::decode_reply(bytes)), bytes);
  server::raw_compile_reply raw;
  raw.observed = seen;
  raw.observed.unobserved = "why not";
  const std::string raw_bytes = server::encode(raw);
  const auto back = server::decode_raw_reply(raw_bytes);
  EXPECT_TRUE(back.observed.inputs == seen.inputs);
  EXPECT_EQ(back.observed.unobserved, "why not");
  // A call kind past the last one is refused (the gate would not know it).
  std::string bad = bytes;
  const std::size_t calls = bad.size() - (3 * 16 + 6 + 9 + 18);  // u32 call, u32 found, u64 length
  ASSERT_EQ(static_cast<unsigned char>(bad[calls]), 0u);         // the first input's call: open
  bad[calls] = 9;
  EXPECT_THROW(server::decode_reply(bad), server::wire_error);
}

TEST(Wire, AnUnknownPchStatusNamesItsField) {
  const auto message = [](std::size_t at) {
    std::string bytes = server::encode(server::compile_reply{});
    // compiled (4 bytes), three empty strings (8 each), then auto_pch at 28 and pch at 32.
    bytes[at] = '\x7f';
    try {
      (void)server::decode_reply(bytes);
    } catch (const server::wire_error& e) {
      return std::string(e.what());
    }
    return std::string("decoded");
  };
  EXPECT_NE(message(28).find("an unknown automatic PCH status"), std::string::npos) << message(28);
  EXPECT_NE(message(32).find("an unknown PCH status"), std::string::npos) << message(32);
}

}  // namespace
}  // namespace cucore
