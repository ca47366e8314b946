// libcurl, loaded at run time (cache/http/curl_api.hpp).
#include "cache/http/curl_api.hpp"

#include <dlfcn.h>

#include <string>

#include "cucore/error.hpp"

namespace cucore::detail {

namespace {

#ifndef CUCORE_CURL_LINKED
// A function of the loaded library, converting to the pointer type of the curl_api member it
// initialises.
class loaded_function {
 public:
  loaded_function(void* library, const char* name) : f_(::dlsym(library, name)) {
    if (f_ == nullptr) {
      throw error(std::string("http cache: the loaded libcurl has no ") + name +
                  ": install libcurl 7.84 or newer (Debian and Ubuntu: libcurl4)");
    }
  }
  template <class F>
  operator F*() const noexcept {  // NOLINT: converts to whichever function pointer it initialises
    return reinterpret_cast<F*>(f_);
  }

 private:
  void* f_;
};

// The library's handle is kept for the process (never dlclose'd: handles may outlive any owner).
curl_api load() {
  void* library = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw error(std::string("http cache: libcurl could not be loaded (") +
                (why != nullptr ? why : "libcurl.so.4") +
                "): install libcurl (Debian and Ubuntu: libcurl4) to use an http(s):// cache");
  }
  const auto f = [library](const char* name) { return loaded_function(library, name); };
  // In curl_api's member order.
  return curl_api{f("curl_global_init"),   f("curl_easy_init"),    f("curl_easy_cleanup"),
                  f("curl_easy_setopt"),   f("curl_easy_perform"), f("curl_easy_getinfo"),
                  f("curl_easy_strerror"), f("curl_slist_append"), f("curl_slist_free_all")};
}
#endif

}  // namespace

const curl_api& curl() {
#ifdef CUCORE_CURL_LINKED
  static const curl_api api{&::curl_global_init,   &::curl_easy_init,    &::curl_easy_cleanup,
                            &::curl_easy_setopt,   &::curl_easy_perform, &::curl_easy_getinfo,
                            &::curl_easy_strerror, &::curl_slist_append, &::curl_slist_free_all};
#else
  static const curl_api api = load();  // a failed load throws, and is tried again next time
#endif
  return api;
}

}  // namespace cucore::detail
