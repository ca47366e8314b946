// Sizes the SQLite cache's tests need to see (the rest of its constants are in internal.hpp), and
// the tests' hook into its access-time write-back clock.
#pragma once

#include <chrono>
#include <cstddef>

namespace cucore::detail::sqlite {

// Page size of a new database, set rather than left to the SQLite build's default. 4096: a 4 KiB
// entry spills into an overflow page (three page reads per hit at 100k entries), but 8192 and
// 16384 made hits no faster (a hit copies as many bytes or more) and cost puts 1.3-2.4x the
// CPU time (whole pages go to the WAL); docs/performance.md, "Scale". Existing files keep the page
// size they were created with (SQLite reads any).
inline constexpr int kPageSize = 4096;

// The most access times one read writes back. A read that finds touch_flush_interval passed
// writes at most this many (one transaction, about two random page writes each); the rest stay
// pending and the following reads write the next batches, without waiting for the interval, until
// none is left. Writes (put, erase, trim) and close still write all of them.
inline constexpr std::size_t kMaxTouchesPerReadFlush = 128;

// Tests only: moves the clock that times reads' write-backs forward by `by` (cumulative), so
// that a test can make touch_flush_interval pass without sleeping.
void advance_touch_clock_for_testing(std::chrono::milliseconds by) noexcept;

}  // namespace cucore::detail::sqlite
