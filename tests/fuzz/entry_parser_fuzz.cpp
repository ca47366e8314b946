// libFuzzer target for the persistent cache entry parser: any bytes must decode to a clean
// status without crashing, and whatever decodes as ok must re-encode to exactly the same bytes.
// Seed corpus: tests/data/golden/.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "cache/entry_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace cucore::detail;
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                               reinterpret_cast<const std::byte*>(data) + size);
  auto header = read_entry_header(bytes);
  auto decoded = decode_entry(bytes, std::nullopt);
  if (decoded.status == entry_status::ok) {
    if (!header) std::abort();  // a decodable entry always has a readable header
    auto again = encode_entry(header->key, *decoded.code);
    if (again != bytes) std::abort();
    if (decode_entry(bytes, std::span<const std::byte>(header->key)).status != entry_status::ok) {
      std::abort();
    }
  }
  return 0;
}
