// The graph module's host-side building blocks that need no GPU: the metadata table and its
// memory pool, and the owner comparison that decides when nodes share an attachment. Run under
// ASan, UBSan and TSan in CI (the GPU tests, which use them on every node, cannot run there).
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <memory_resource>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph_state.hpp"

namespace {

using cucore::detail::entry_pool;
using cucore::detail::node_entry;
using cucore::detail::node_meta;
using cucore::detail::node_table;
using cucore::detail::owner_list;

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// A map on the pool, inserted into and erased from at random, against a std::map of the same
// operations: the values survive every reuse of freed blocks and every rehash.
TEST(GraphEntryPool, AMapOnThePoolKeepsItsValuesThroughInsertsErasesAndRehashes) {
  entry_pool pool;
  std::pmr::unordered_map<std::uint64_t, std::vector<int>> map{&pool};
  std::map<std::uint64_t, std::vector<int>> expected;
  std::mt19937_64 random(7);
  for (int step = 0; step < 20000; ++step) {
    const std::uint64_t key = random() % 3000;
    if (random() % 3 == 0) {
      EXPECT_EQ(map.erase(key), expected.erase(key));
    } else {
      std::vector<int> value(static_cast<std::size_t>(key % 5), static_cast<int>(step));
      map.insert_or_assign(key, value);
      expected.insert_or_assign(key, value);
    }
  }
  ASSERT_EQ(map.size(), expected.size());
  for (const auto& [key, value] : expected) {
    const auto it = map.find(key);
    ASSERT_NE(it, map.end()) << key;
    EXPECT_EQ(it->second, value) << key;
  }
}

// After reserve(), the next block of up to kMaxBlock bytes comes without a new chunk: what lets
// an add insert its entry after the CUDA call without a way to fail.
TEST(GraphEntryPool, AfterReserveTheNextSmallBlockNeedsNoNewChunk) {
  entry_pool pool;
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (int i = 0; i < 200; ++i) {
    const std::size_t bytes = 16 + static_cast<std::size_t>(i * 37) % 240;
    pool.reserve();
    const std::size_t chunks = pool.chunk_count();
    void* p = pool.allocate(entry_pool::kMaxBlock);
    EXPECT_EQ(pool.chunk_count(), chunks) << "block " << i;
    EXPECT_TRUE(aligned16(p));
    blocks.emplace_back(p, entry_pool::kMaxBlock);
    void* q = pool.allocate(bytes);  // not reserved: may take a chunk
    EXPECT_TRUE(aligned16(q));
    blocks.emplace_back(q, bytes);
  }
  EXPECT_GT(pool.chunk_count(), 1u);
  for (auto [p, bytes] : blocks) pool.deallocate(p, bytes);
}

// Freed blocks are reused for the same size class; large or over-aligned blocks come from the
// heap and go back to it.
TEST(GraphEntryPool, FreedBlocksAreReusedAndLargeOnesUseTheHeap) {
  entry_pool pool;
  void* a = pool.allocate(72);
  pool.deallocate(a, 72);
  EXPECT_EQ(pool.allocate(80), a) << "72 and 80 bytes are one 16-byte size class";
  const std::size_t chunks = pool.chunk_count();
  void* large = pool.allocate(4 * entry_pool::kMaxBlock);
  void* over_aligned = pool.allocate(64, 64);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(over_aligned) % 64, 0u);
  EXPECT_EQ(pool.chunk_count(), chunks);
  pool.deallocate(large, 4 * entry_pool::kMaxBlock);
  pool.deallocate(over_aligned, 64, 64);
  pool.deallocate(a, 80);
}

// A fake node handle: the table only compares and hashes them. Heap-like addresses, 16 bytes
// apart (the alignment whose low bits carry nothing), from a few dense ranges.
CUgraphNode handle(std::uint64_t i) {
  return reinterpret_cast<CUgraphNode>(0x7f0000000000ull + (i % 7) * 0x100000ull + (i / 7) * 16);
}

// The table against a std::map of the same operations, every entry looked up at intervals and at
// the end: backward-shift deletion must keep every remaining entry reachable, through growth and
// reuse of freed entries.
TEST(GraphNodeTable, FindsExactlyTheEntriesItHoldsThroughInsertsErasesAndGrowth) {
  entry_pool pool;
  node_table table(pool);
  std::map<CUgraphNode, std::uint64_t> expected;
  std::mt19937_64 random(11);
  for (int step = 0; step < 20000; ++step) {
    const CUgraphNode key = handle(random() % 2000);
    if (random() % 3 == 0) {
      node_entry* e = table.find(key);
      ASSERT_EQ(e != nullptr, expected.count(key) == 1) << step;
      if (e != nullptr) {
        EXPECT_EQ(e->first, key);
        table.erase(e);
        expected.erase(key);
      }
    } else if (node_entry* e = table.find(key)) {
      e->second.serial = static_cast<std::uint64_t>(step);
      expected[key] = static_cast<std::uint64_t>(step);
    } else {
      node_meta meta;
      meta.serial = static_cast<std::uint64_t>(step);
      table.reserve_one();
      table.emplace(key, std::move(meta));
      expected[key] = static_cast<std::uint64_t>(step);
    }
    if (step % 997 == 0) {
      for (const auto& [k, serial] : expected) {
        const node_entry* e = table.find(k);
        ASSERT_NE(e, nullptr) << step;
        EXPECT_EQ(e->second.serial, serial);
      }
    }
  }
  ASSERT_EQ(table.size(), expected.size());
  std::map<CUgraphNode, std::uint64_t> seen;
  for (const auto& [node, m] : table) seen[node] = m.serial;
  EXPECT_EQ(seen, expected) << "iteration visits every entry once";
  for (std::uint64_t i = 0; i < 2000; ++i) {
    EXPECT_EQ(table.contains(handle(i)), expected.count(handle(i)) == 1) << i;
  }
}

// Entries stay where they are while the table grows: references into them remain valid.
TEST(GraphNodeTable, EntriesDoNotMoveWhenTheTableGrows) {
  entry_pool pool;
  node_table table(pool);
  node_meta& first = table[handle(0)];
  first.serial = 42;
  for (std::uint64_t i = 1; i < 5000; ++i) table[handle(i)].serial = i;
  EXPECT_EQ(&table[handle(0)], &first);
  EXPECT_EQ(first.serial, 42u);
  EXPECT_EQ(table.size(), 5000u);
}

// After reserve_one(), emplace needs no memory: what lets an add insert its entry after the CUDA
// call without a way to fail.
TEST(GraphNodeTable, AfterReserveOneEmplaceTakesNoNewChunk) {
  static_assert(noexcept(std::declval<node_table&>().emplace(nullptr, node_meta{})));
  entry_pool pool;
  node_table table(pool);
  for (std::uint64_t i = 0; i < 3000; ++i) {
    table.reserve_one();
    const std::size_t chunks = pool.chunk_count();
    table.emplace(handle(i), node_meta{});
    ASSERT_EQ(pool.chunk_count(), chunks) << i;
  }
}

std::shared_ptr<const void> object() {
  return std::make_shared<int>(0);
}

TEST(GraphOwnerList, SameOwnersMeansTheSameObjectsInTheSameOrder) {
  const auto kernel = object();
  const auto x = object();
  const auto y = object();
  const owner_list a{kernel, x, y};
  EXPECT_TRUE(a.same_owners(owner_list{kernel, x, y}));
  EXPECT_FALSE(a.same_owners(owner_list{kernel, y, x})) << "order";
  EXPECT_FALSE(a.same_owners(owner_list{kernel, x})) << "count";
  EXPECT_FALSE(a.same_owners(owner_list{kernel, x, object()})) << "another object";
  EXPECT_TRUE(owner_list{}.same_owners(owner_list{nullptr})) << "null owners are not kept";
}

// Ownership decides, not the address: an aliasing shared_ptr of x is x; an unrelated object at
// the same address is not.
TEST(GraphOwnerList, OwnershipNotTheAddressDecides) {
  auto pair = std::make_shared<std::pair<int, int>>(1, 2);
  const std::shared_ptr<const void> whole = pair;
  const std::shared_ptr<const void> member(pair, &pair->second);
  EXPECT_TRUE(owner_list{whole}.same_owners(owner_list{member}));
  static int shared_address = 0;
  const std::shared_ptr<const void> a(&shared_address, [](const void*) {});
  const std::shared_ptr<const void> b(&shared_address, [](const void*) {});
  EXPECT_FALSE(owner_list{a}.same_owners(owner_list{b}));
}

// More than the three kept inline.
TEST(GraphOwnerList, ComparesOwnersBeyondTheInlineOnes) {
  std::vector<std::shared_ptr<const void>> objects;
  for (int i = 0; i < 6; ++i) objects.push_back(object());
  owner_list a;
  owner_list b;
  owner_list c;
  for (int i = 0; i < 6; ++i) {
    a.push(objects[static_cast<std::size_t>(i)]);
    b.push(objects[static_cast<std::size_t>(i)]);
    c.push(i == 5 ? object() : objects[static_cast<std::size_t>(i)]);
  }
  EXPECT_TRUE(a.same_owners(b));
  EXPECT_FALSE(a.same_owners(c));
}

}  // namespace
