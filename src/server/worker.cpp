// A compile server's worker process: it compiles the requests its server sends, in its client's
// directory, with the NVRTC its clients loaded, keeping its automatic PCH images across requests.
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/server.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"
#include "pch/auto_pch.hpp"
#include "program/compiler_handles.hpp"
#include "server/internal.hpp"

namespace cucore {
namespace server {
namespace {

// The client's view: its directory. (Its compilers' variables are the worker's own, from its
// start: run_compile_server_worker refuses a request with others.)
void enter_client_view(const client_view& view) {
  if (::chdir(view.working_directory.c_str()) != 0) {
    throw error(
        errno_text("cannot enter the client's directory \"" + view.working_directory + "\""));
  }
}

compile_reply compile_in_worker(const compile_request& q) {
  enter_client_view(q.view);
  program_options options = q.options;
  options.compile_server = compile_server_mode::off;
  // The flags this worker would give NVRTC must be the client's (the toolkit found, every field
  // carried): else the client compiles itself.
  if (compiler_flags(options, source_type::cxx, q.target) != q.flags) {
    throw error("the worker's NVRTC flags for this program differ from the client's");
  }
  program prog(q.code, source_type::cxx, std::move(options));
  compile_reply a;
  try {
    const object_code out = prog.compile(q.target, q.name_expressions);
    a.compiled = true;
    a.target = out.type();
    a.code.assign(reinterpret_cast<const char*>(out.code().data()), out.size());
    a.name = out.name();
    for (const auto& [expr, lowered] : out.symbol_mapping()) {
      a.symbols.push_back(expr);
      a.symbols.push_back(lowered);
    }
    if (const auto& tile = out.tile_ir()) {
      a.tile_ir = std::string(reinterpret_cast<const char*>(tile->code().data()), tile->size());
    }
  } catch (const compile_error& e) {
    a.compiled = false;
    a.backend = e.backend();
    a.status = e.status();
  }
  a.log = prog.log();
  a.auto_pch = prog.last_auto_pch();
  a.pch = prog.last_pch_status();
  return a;
}

// What a plain compile's PCH getters answer in this worker's NVRTC (a compile that used an
// automatic PCH reports these: the client's compile had none), asked once of a tiny program.
struct plain_pch_answers {
  nvrtcResult status = NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED;
  nvrtcResult required_code = NVRTC_SUCCESS;
  std::size_t required = 0;
};

const plain_pch_answers& plain_pch(const detail::nvrtc_api& api) {
  static const plain_pch_answers answers = [&] {
    plain_pch_answers a;
    nvrtcProgram prog = nullptr;
    if (api.nvrtcCreateProgram(&prog, "__global__ void cucore_probe() {}\n", "probe.cu", 0, nullptr,
                               nullptr) != NVRTC_SUCCESS) {
      throw error("the worker's NVRTC cannot create a program");
    }
    detail::nvrtc_program owned(api, prog);
    if (api.nvrtcCompileProgram(prog, 0, nullptr) != NVRTC_SUCCESS) {
      throw error("the worker's NVRTC cannot compile a probe program");
    }
    a.status = api.nvrtcGetPCHCreateStatus(prog);
    a.required_code = api.nvrtcGetPCHHeapSizeRequired(prog, &a.required);
    return a;
  }();
  return answers;
}

// A drop-in's compile: the program's own option list as given, and every getter's answer after
// it, as the client's NVRTC would have given them (automatic PCH where the server has an image,
// with the plain compile's PCH answers and log).
raw_compile_reply compile_raw_in_worker(const compile_request& q) {
  enter_client_view(q.view);
  const auto& api = detail::nvrtc("the compile server's worker");
  program_options options = q.options;
  options.compile_server = compile_server_mode::off;
  // The option list itself tells images apart (the drop-in's reading of it may not).
  std::string identity = "cucore-server-raw-options";
  for (const auto& f : q.flags) (identity += '\0') += f;
  detail::auto_pch_compile automatic(api, q.code, options, code_type::ptx, std::nullopt, identity);
  std::vector<const char*> header_contents, header_names;
  for (const auto& h : options.headers) {
    header_contents.push_back(h.contents.c_str());
    header_names.push_back(h.name.c_str());
  }
  const int header_count = static_cast<int>(header_names.size());
  bool plain_retry = false, force_plain = false;
  for (;;) {
    const bool with_pch = automatic.active() && !force_plain;
    std::vector<std::string> flags = q.flags;
    if (with_pch) flags.insert(flags.end(), automatic.flags().begin(), automatic.flags().end());
    std::vector<const char*> argv;
    for (const auto& f : flags) argv.push_back(f.c_str());
    nvrtcProgram raw = nullptr;
    const nvrtcResult created =
        api.nvrtcCreateProgram(&raw, q.code.c_str(), options.name.c_str(), header_count,
                               header_count ? header_contents.data() : nullptr,
                               header_count ? header_names.data() : nullptr);
    if (created != NVRTC_SUCCESS) {
      throw error(std::string("nvrtcCreateProgram failed: ") + api.nvrtcGetErrorString(created));
    }
    detail::nvrtc_program prog(api, raw);
    for (const auto& e : q.name_expressions) {
      if (api.nvrtcAddNameExpression(prog.get(), e.c_str()) != NVRTC_SUCCESS) {
        throw error("nvrtcAddNameExpression refused \"" + e + "\"");
      }
    }
    const nvrtcResult result = api.nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()),
                                                       argv.empty() ? nullptr : argv.data());
    std::string log;
    if (std::size_t size = 0; api.nvrtcGetProgramLogSize(prog.get(), &size) == NVRTC_SUCCESS) {
      log.assign(size + 1, '\0');
      if (api.nvrtcGetProgramLog(prog.get(), log.data()) != NVRTC_SUCCESS) log.clear();
      log.resize(std::strlen(log.c_str()));
    }
    if (result != NVRTC_SUCCESS) {
      // A failure with an automatic PCH is compiled again plain: its answers (the log, the PCH
      // getters') are then the client's own.
      if (with_pch) {
        plain_retry = automatic.failed(log);  // true: the failure was PCH mode's, not the code's
        force_plain = true;
        continue;
      }
    } else if (plain_retry) {
      automatic.retry_succeeded();
    } else if (with_pch && automatic.succeeded(prog.get(), log)) {
      continue;  // its log speaks of PCH: again, plain
    }
    raw_compile_reply a;
    a.result = result;
    a.record = detail::record_nvrtc_program(api, prog.get(), q.name_expressions);
    a.auto_pch = automatic.status();
    if (with_pch) {
      const auto& plain = plain_pch(api);
      a.record.pch_status = plain.status;
      a.record.pch_required_code = plain.required_code;
      a.record.pch_required = plain.required;
    }
    return a;
  }
}

}  // namespace
}  // namespace server

int run_compile_server_worker(int fd, const std::string& nvrtc) {
  using namespace std::chrono_literals;
  server::unique_fd conn(fd);
  ::signal(SIGPIPE, SIG_IGN);
  // The very file the clients of this worker's pool loaded.
  if (!nvrtc.empty()) detail::pin_library(detail::library_spec_of(toolkit::library::nvrtc), nvrtc);
  // The compilers' variables as NVRTC sees them at its start (some are read once per process):
  // a request with other values is another pool's (the server never sends one here).
  const server::compiler_variables own_environment = server::current_compiler_variables();
  detail::file_identity own{};
  try {  // loaded now, so the first request does not pay for it
    const auto& api = detail::nvrtc("the compile server's worker");
    if (auto id = detail::identify_file(api.library->path())) own = *id;
  } catch (const std::exception& e) {
    cucore::log(log_level::warning, std::string("compile server worker: ") + e.what());
  }
  for (;;) {
    std::optional<server::frame> f;
    try {
      f = server::read_frame(conn.get(), 24h);
    } catch (const std::exception&) {
      return 1;
    }
    if (!f) return 0;  // the server closed: exit, the automatic PCH files with us
    using server::frame_type;
    const bool raw = f->type == frame_type::raw_compile_request ||
                     f->type == frame_type::raw_compile_request_make_image;
    const bool make_image = f->type == frame_type::compile_request_make_image ||
                            f->type == frame_type::raw_compile_request_make_image;
    if (!raw && !make_image && f->type != frame_type::compile_request) return 1;
    // The server decides where and when a prefix's image is made (after the compile that asked,
    // off its critical path): any other compile uses an image this worker holds, and makes none.
    detail::set_auto_pch_creation(make_image ? detail::auto_pch_creation::now
                                             : detail::auto_pch_creation::never);
    frame_type type = raw ? frame_type::raw_compile_reply : frame_type::compile_reply;
    std::string payload;
    try {
      const server::compile_request q = server::decode_request(f->payload);
      if (own.path.empty() || q.view.nvrtc_path != own.path || q.view.nvrtc_inode != own.inode ||
          q.view.nvrtc_device != own.device || q.view.nvrtc_size != own.size ||
          q.view.nvrtc_mtime_ns != own.mtime_ns) {
        throw error("the client loaded another NVRTC (\"" + q.view.nvrtc_path +
                    "\") than the worker (\"" + own.path + "\")");
      }
      if (q.view.environment != own_environment) {
        throw error("the client's compiler variables differ from the worker's");
      }
      // Observed: the client's store gate checks what it read. A compile that read this
      // process's own view (/dev/stdin, /proc/self, the host's name, ...) is the client's to make.
      const auto observed = [](auto&& compile_it) {
        detail::compiler_observation watch;
        auto reply = compile_it();
        reply.observed = watch.finish();
        if (const auto* in = detail::first_process_view_input(reply.observed)) {
          throw error("the compile read " + in->name +
                      ", whose contents are the worker's own: the client compiles it");
        }
        return server::encode(reply);
      };
      payload = raw ? observed([&] { return server::compile_raw_in_worker(q); })
                    : observed([&] { return server::compile_in_worker(q); });
    } catch (const std::exception& e) {
      type = frame_type::refusal;
      payload = e.what();
    }
    try {
      server::write_frame(conn.get(), type, payload, 60s);
    } catch (const std::exception&) {
      return 1;
    }
  }
}

}  // namespace cucore
