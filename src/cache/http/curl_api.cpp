// libcurl, loaded at run time (cache/http/curl_api.hpp).
#include "cache/http/curl_api.hpp"

#include <dlfcn.h>

#include <string>

#include "cucore/error.hpp"

namespace cucore::detail {

namespace {

#ifndef CUCORE_CURL_LINKED
// The library's handle is kept for the process (never dlclose'd: handles may outlive any owner).
void* symbol(void* library, const char* name) {
  void* f = ::dlsym(library, name);
  if (f == nullptr) {
    throw error(std::string("http cache: the loaded libcurl has no ") + name +
                ": install libcurl 7.84 or newer (Debian and Ubuntu: libcurl4)");
  }
  return f;
}

curl_api load() {
  void* library = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = ::dlerror();
    throw error(std::string("http cache: libcurl could not be loaded (") +
                (why != nullptr ? why : "libcurl.so.4") +
                "): install libcurl (Debian and Ubuntu: libcurl4) to use an http(s):// cache");
  }
  curl_api api{};
  api.global_init =
      reinterpret_cast<decltype(api.global_init)>(symbol(library, "curl_global_init"));
  api.easy_init = reinterpret_cast<decltype(api.easy_init)>(symbol(library, "curl_easy_init"));
  api.easy_cleanup =
      reinterpret_cast<decltype(api.easy_cleanup)>(symbol(library, "curl_easy_cleanup"));
  api.easy_setopt =
      reinterpret_cast<decltype(api.easy_setopt)>(symbol(library, "curl_easy_setopt"));
  api.easy_perform =
      reinterpret_cast<decltype(api.easy_perform)>(symbol(library, "curl_easy_perform"));
  api.easy_getinfo =
      reinterpret_cast<decltype(api.easy_getinfo)>(symbol(library, "curl_easy_getinfo"));
  api.easy_strerror =
      reinterpret_cast<decltype(api.easy_strerror)>(symbol(library, "curl_easy_strerror"));
  api.slist_append =
      reinterpret_cast<decltype(api.slist_append)>(symbol(library, "curl_slist_append"));
  api.slist_free_all =
      reinterpret_cast<decltype(api.slist_free_all)>(symbol(library, "curl_slist_free_all"));
  return api;
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
