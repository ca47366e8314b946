// SHA-256 compress with the Intel SHA extensions. Compiled with -msha -msse4.1 (src/CMakeLists.txt,
// x86-64 only); only called when sha256_shani_available() (common/sha256.hpp).
#include <immintrin.h>

#include "common/sha256.hpp"

namespace cucore::detail {
namespace {

// The round constants for rounds 4g..4g+3.
inline __m128i round_constants(int g) noexcept {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(kSha256RoundConstants.data() + 4 * g));
}

}  // namespace

void sha256_compress_shani(std::uint32_t* state, const std::byte* blocks,
                           std::size_t count) noexcept {
  // Big-endian words: reverse the bytes of each 32-bit lane.
  const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);

  // The instructions keep the state as ABEF and CDGH (high lane first).
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state));         // DCBA
  __m128i state1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4));  // HGFE
  tmp = _mm_shuffle_epi32(tmp, 0xb1);                                             // CDAB
  state1 = _mm_shuffle_epi32(state1, 0x1b);                                       // EFGH
  __m128i state0 = _mm_alignr_epi8(tmp, state1, 8);                               // ABEF
  state1 = _mm_blend_epi16(state1, tmp, 0xf0);                                    // CDGH

  for (; count > 0; --count, blocks += 64) {
    const __m128i abef_saved = state0;
    const __m128i cdgh_saved = state1;
    __m128i msg[4];
    for (int i = 0; i < 4; ++i) {
      msg[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * i)),
                                byte_swap);
    }
    // Sixteen groups of four rounds. Group g uses message words W[4g..4g+3] (msg[g % 4]); while
    // it runs, the schedule finishes W[4g+4..] (msg2) and starts W[4g+12..] (msg1).
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      __m128i& current = msg[g & 3];
      __m128i words = _mm_add_epi32(current, round_constants(g));
      state1 = _mm_sha256rnds2_epu32(state1, state0, words);
      if (g >= 3 && g <= 14) {
        __m128i& next = msg[(g + 1) & 3];
        next = _mm_add_epi32(next, _mm_alignr_epi8(current, msg[(g + 3) & 3], 4));
        next = _mm_sha256msg2_epu32(next, current);
      }
      words = _mm_shuffle_epi32(words, 0x0e);
      state0 = _mm_sha256rnds2_epu32(state0, state1, words);
      if (g >= 1 && g <= 12) {
        __m128i& previous = msg[(g + 3) & 3];
        previous = _mm_sha256msg1_epu32(previous, current);
      }
    }
    state0 = _mm_add_epi32(state0, abef_saved);
    state1 = _mm_add_epi32(state1, cdgh_saved);
  }

  tmp = _mm_shuffle_epi32(state0, 0x1b);        // FEBA
  state1 = _mm_shuffle_epi32(state1, 0xb1);     // DCHG
  state0 = _mm_blend_epi16(tmp, state1, 0xf0);  // DCBA
  state1 = _mm_alignr_epi8(state1, tmp, 8);     // HGFE
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), state0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), state1);
}

}  // namespace cucore::detail
