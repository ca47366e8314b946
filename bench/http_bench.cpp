// The HTTP tier beside its floor, measured in the same run against one nginx this program starts
// on a free loopback port (it exits 0 with a note where nginx is not installed):
//   remote hit (http_program_cache::get)  vs a raw libcurl GET of the same object on a warm
//                                           connection, into a reserved buffer
//   remote put (http_program_cache::put)  vs a raw libcurl PUT of the same bytes
// Goal (issue 42): remote hit within 1.3x of the raw GET.
#include <benchmark/benchmark.h>
#include <curl/curl.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "cucore/cache/http.hpp"
#include "nginx_test_support.hpp"
#include "remote_tier_bench.hpp"

namespace {

using namespace cucore::bench;    // remote_tier_bench.hpp
using namespace cucore::testing;  // nginx_test_support.hpp

nginx_server& server() {
  return shared_server<nginx_server>();
}

cucore::http_cache_options options() {
  cucore::http_cache_options o;
  o.url = server().url("cache");
  return o;
}

// A plain libcurl handle, kept alive: what a hand-written client would do.
class raw_curl {
 public:
  raw_curl() : handle_(curl_easy_init()) {
    curl_easy_setopt(handle_.get(), CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(handle_.get(), CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(handle_.get(), CURLOPT_WRITEFUNCTION, &raw_curl::write);
    curl_easy_setopt(handle_.get(), CURLOPT_WRITEDATA, this);
    curl_easy_setopt(handle_.get(), CURLOPT_READFUNCTION, &raw_curl::read);
    curl_easy_setopt(handle_.get(), CURLOPT_READDATA, this);
    headers_.reset(curl_slist_append(nullptr, "Expect:"));
    curl_easy_setopt(handle_.get(), CURLOPT_HTTPHEADER, headers_.get());
  }
  // GET into `body` (its capacity kept between calls); the status.
  long get(const std::string& url) {
    body_.clear();
    curl_easy_setopt(handle_.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle_.get(), CURLOPT_HTTPGET, 1L);
    return perform();
  }
  long put(const std::string& url, const std::string& bytes) {
    upload_ = &bytes;
    sent_ = 0;
    curl_easy_setopt(handle_.get(), CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle_.get(), CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(handle_.get(), CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(bytes.size()));
    return perform();
  }
  const std::string& body() const { return body_; }

 private:
  long perform() {
    long status = 0;
    if (curl_easy_perform(handle_.get()) != CURLE_OK) return -1;
    curl_easy_getinfo(handle_.get(), CURLINFO_RESPONSE_CODE, &status);
    return status;
  }
  static std::size_t write(char* data, std::size_t size, std::size_t n, void* self) {
    static_cast<raw_curl*>(self)->body_.append(data, size * n);
    return size * n;
  }
  static std::size_t read(char* out, std::size_t size, std::size_t n, void* self) {
    auto& r = *static_cast<raw_curl*>(self);
    const std::size_t k = std::min(size * n, r.upload_->size() - r.sent_);
    std::memcpy(out, r.upload_->data() + r.sent_, k);
    r.sent_ += k;
    return k;
  }
  struct easy_deleter {
    void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
  };
  struct slist_deleter {
    void operator()(curl_slist* l) const noexcept { curl_slist_free_all(l); }
  };
  std::unique_ptr<CURL, easy_deleter> handle_;
  std::unique_ptr<curl_slist, slist_deleter> headers_;
  std::string body_;
  const std::string* upload_ = nullptr;
  std::size_t sent_ = 0;
};

void BM_HttpHit(benchmark::State& state) {
  remote_hit<cucore::http_program_cache>(state, options());
}
BENCHMARK(BM_HttpHit)->Arg(4 << 10)->Arg(256 << 10);

// The floor: the same object's bytes by a raw GET on a warm connection.
void BM_RawCurlGetFloor(benchmark::State& state) {
  cucore::http_program_cache cache(options());
  cache.put("hit", random_code(static_cast<std::size_t>(state.range(0))));
  raw_curl raw;
  const std::string url = cache.object_url("hit");
  for (auto _ : state) {
    if (raw.get(url) != 200) state.SkipWithError("no object");
    benchmark::DoNotOptimize(raw.body().data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RawCurlGetFloor)->Arg(4 << 10)->Arg(256 << 10);

void BM_HttpPut(benchmark::State& state) {
  remote_put<cucore::http_program_cache>(state, options());
}
BENCHMARK(BM_HttpPut)->Arg(4 << 10)->Arg(256 << 10);

void BM_RawCurlPutFloor(benchmark::State& state) {
  raw_curl raw;
  const auto code = random_code(static_cast<std::size_t>(state.range(0)));
  const std::string bytes(reinterpret_cast<const char*>(code.code().data()), code.size());
  const std::string url = server().url("cache", "/raw-put");
  for (auto _ : state) {
    const long status = raw.put(url, bytes);
    if (status < 200 || status >= 300) state.SkipWithError("PUT refused");
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_RawCurlPutFloor)->Arg(4 << 10)->Arg(256 << 10);

}  // namespace

int main(int argc, char** argv) {
  return cucore::bench::run_benchmarks(argc, argv, "http_bench", server());
}
