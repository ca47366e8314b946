// The exception hierarchy. Every error cucore raises derives from cucore::error; messages name the
// input that was wrong and say what to do instead.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace cucore {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An option, argument or combination cucore refuses before calling any CUDA library.
class invalid_argument : public error {
 public:
  using error::error;
};

// A program cache key cannot see an input the compile reads (headers through include_path or a
// quoted #include, a precompiled header, libdevice): fingerprint it and pass it as the key's
// extra_digest (see make_program_cache_key), or compile without the cache.
class extra_digest_required : public invalid_argument {
 public:
  using invalid_argument::invalid_argument;
};

// A CUDA driver call failed. `result()` is the CUresult value, `result_name()` its enumerator name
// ("CUDA_ERROR_INVALID_VALUE"), `call()` the driver function that returned it.
class cuda_error : public error {
 public:
  cuda_error(int result, std::string result_name, std::string call, const std::string& detail = {});
  int result() const noexcept { return result_; }
  const std::string& result_name() const noexcept { return result_name_; }
  const std::string& call() const noexcept { return call_; }

 private:
  int result_;
  std::string result_name_;
  std::string call_;
};

// A compiler or linker (NVRTC, libNVVM, nvJitLink, the driver linker) rejected its input.
// `log()` is the compiler's full log, with line numbers for source errors.
class compile_error : public error {
 public:
  compile_error(std::string backend, std::string status, std::string log);
  const std::string& backend() const noexcept { return backend_; }
  const std::string& status() const noexcept { return status_; }
  const std::string& log() const noexcept { return log_; }

 private:
  std::string backend_;
  std::string status_;
  std::string log_;
};

// A compiler library call failed for a reason other than the input program (out of memory, an
// internal error, an API misuse). Carries the library and its status string.
class library_error : public error {
 public:
  library_error(std::string library, std::string call, std::string status);
  const std::string& library() const noexcept { return library_; }
  const std::string& call() const noexcept { return call_; }
  const std::string& status() const noexcept { return status_; }

 private:
  std::string library_;
  std::string call_;
  std::string status_;
};

// A CUDA library could not be opened. Names the library, every place searched, and the feature
// that needed it.
class library_not_found : public error {
 public:
  library_not_found(std::string library, std::vector<std::string> searched, std::string feature,
                    std::string reason);
  const std::string& library() const noexcept { return library_; }
  const std::vector<std::string>& searched() const noexcept { return searched_; }
  const std::string& feature() const noexcept { return feature_; }

 private:
  std::string library_;
  std::vector<std::string> searched_;
  std::string feature_;
};

// A spec that names no cache (on the command line, a usage error). `spec()` is the text refused
// (a password or token in it replaced by "***"), `variable()` the environment variable it came from
// ("CUCORE_REMOTE_CACHE"; empty: the spec itself), `reason()` what is wrong and what to write
// instead.
class cache_spec_error : public invalid_argument {
 public:
  cache_spec_error(std::string variable, std::string spec, std::string reason);
  const std::string& variable() const noexcept { return variable_; }
  const std::string& spec() const noexcept { return spec_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string variable_, spec_, reason_;
};

}  // namespace cucore
