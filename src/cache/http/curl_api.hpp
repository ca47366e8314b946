#pragma once
// libcurl for the HTTP tier, loaded when the first HTTP cache opens (dlopen of libcurl.so.4): a
// program that never uses one — every program under `cucore run`, whose drop-ins hold this
// library — never loads libcurl and what it depends on (GnuTLS, Kerberos, LDAP, ...). A build that
// links libcurl in statically (CUCORE_CURL_LINKED: the portable wheel) calls it directly.

#include <curl/curl.h>

namespace cucore::detail {

struct curl_api {
  decltype(&::curl_global_init) global_init;
  decltype(&::curl_easy_init) easy_init;
  decltype(&::curl_easy_cleanup) easy_cleanup;
  decltype(&::curl_easy_setopt) easy_setopt;
  decltype(&::curl_easy_perform) easy_perform;
  decltype(&::curl_easy_getinfo) easy_getinfo;
  decltype(&::curl_easy_strerror) easy_strerror;
  decltype(&::curl_slist_append) slist_append;
  decltype(&::curl_slist_free_all) slist_free_all;
};

// The functions, loaded on first use (thread-safe). Throws cucore::error naming the library and
// what to install when it cannot be loaded.
const curl_api& curl();

}  // namespace cucore::detail
