// program::compile's side of the compile server (docs/compile-server.md, "Clients").
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cucore/options.hpp"
#include "server/wire.hpp"

namespace cucore::server {

// The mode a compile runs with: the option, else CUCORE_COMPILE_SERVER, else off.
compile_server_mode effective_mode(const program_options& options);

// Sends a c++ compile to the user's server (starting one for compile_server_mode::on). nullopt
// whenever the answer is not the compile's own (no server, a refusal, a dead or silent worker, a
// version mismatch): the caller compiles in-process. Never throws but std::bad_alloc.
std::optional<compile_reply> compile_through_server(compile_server_mode mode, std::string_view code,
                                                    const program_options& options,
                                                    const std::vector<std::string>& flags,
                                                    code_type target,
                                                    std::span<const std::string> name_expressions);

// `cucore run`'s drop-in NVRTC: the program's own option list (`flags`, compiled as given),
// `options` the drop-in's reading of it (for routing and automatic PCH: headers and name
// included), and every getter's answer in the reply. nullopt as above.
std::optional<raw_compile_reply> compile_raw_through_server(
    compile_server_mode mode, std::string_view code, const program_options& options,
    std::span<const std::string> flags, std::span<const std::string> name_expressions);

}  // namespace cucore::server
