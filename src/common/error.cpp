#include "cucore/error.hpp"

#include <utility>

namespace cucore {
namespace {

std::string cuda_message(const std::string& name, const std::string& call,
                         const std::string& detail) {
  std::string message = call + " failed with " + name;
  if (!detail.empty()) message += " (" + detail + ")";
  return message;
}

std::string compile_message(const std::string& backend, const std::string& status,
                            const std::string& log) {
  std::string message = backend + " compilation failed (" + status + ")";
  if (!log.empty()) message += ":\n" + log;
  return message;
}

std::string not_found_message(const std::string& library, const std::vector<std::string>& searched,
                              const std::string& feature, const std::string& reason) {
  std::string message = library + " is needed for " + feature + " but could not be loaded";
  if (!reason.empty()) message += ": " + reason;
  message += ".\nSearched:";
  for (const auto& place : searched) message += "\n  " + place;
  if (searched.empty()) message += " nothing";
  message +=
      "\nInstall the CUDA toolkit, or point CUCORE_CUDA_HOME (or CUDA_HOME) at the directory that "
      "holds it, or install NVIDIA's CUDA 13 wheels (pip install \"cucore[cu13]\") into the "
      "active environment or into a directory named by CUCORE_CUDA_WHEELS.";
  if (library == "CUDA driver") {
    message = library + " (libcuda.so.1) is needed for " + feature + " but could not be loaded" +
              (reason.empty() ? "" : ": " + reason) +
              ".\nIt comes with the NVIDIA GPU driver, which this machine does not appear to have.";
  }
  return message;
}

}  // namespace

cuda_error::cuda_error(int result, std::string result_name, std::string call,
                       const std::string& detail)
    : error(cuda_message(result_name, call, detail)),
      result_(result),
      result_name_(std::move(result_name)),
      call_(std::move(call)) {}

compile_error::compile_error(std::string backend, std::string status, std::string log)
    : error(compile_message(backend, status, log)),
      backend_(std::move(backend)),
      status_(std::move(status)),
      log_(std::move(log)) {}

library_error::library_error(std::string library, std::string call, std::string status)
    : error(library + ": " + call + " failed: " + status),
      library_(std::move(library)),
      call_(std::move(call)),
      status_(std::move(status)) {}

library_not_found::library_not_found(std::string library, std::vector<std::string> searched,
                                     std::string feature, std::string reason)
    : error(not_found_message(library, searched, feature, reason)),
      library_(std::move(library)),
      searched_(std::move(searched)),
      feature_(std::move(feature)) {}

cache_spec_error::cache_spec_error(std::string variable, std::string spec, std::string reason)
    : invalid_argument((variable.empty() ? std::string("cache spec") : "$" + variable) + " \"" +
                       spec + "\": " + reason),
      variable_(std::move(variable)),
      spec_(std::move(spec)),
      reason_(std::move(reason)) {}

}  // namespace cucore
