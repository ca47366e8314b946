// Corpus kernel (c): CUB block algorithms from the toolkit's CCCL.
//
// Each block loads BlockThreads * ItemsPerThread keys (blocked arrangement, transposed through
// shared memory), sorts them with BlockRadixSort, writes the sorted run, an exclusive prefix sum
// of the sorted keys (BlockScan) and the block's total (BlockReduce over 64-bit sums). A template
// kernel: compile with the name expression block_sort_scan<128, 4>.
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cuda/std/cstdint>

template <int BlockThreads, int ItemsPerThread>
__global__ void __launch_bounds__(BlockThreads)
    block_sort_scan(const cuda::std::uint32_t* keys, int n, cuda::std::uint32_t* sorted,
                    cuda::std::uint32_t* prefix, unsigned long long* block_totals) {
  using Key = cuda::std::uint32_t;
  using Load = cub::BlockLoad<Key, BlockThreads, ItemsPerThread, cub::BLOCK_LOAD_TRANSPOSE>;
  using Sort = cub::BlockRadixSort<Key, BlockThreads, ItemsPerThread>;
  using Scan = cub::BlockScan<Key, BlockThreads>;
  using Reduce = cub::BlockReduce<unsigned long long, BlockThreads>;
  using Store = cub::BlockStore<Key, BlockThreads, ItemsPerThread, cub::BLOCK_STORE_TRANSPOSE>;

  __shared__ union {
    typename Load::TempStorage load;
    typename Sort::TempStorage sort;
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
    typename Store::TempStorage store;
  } temp;

  constexpr int kTile = BlockThreads * ItemsPerThread;
  const int offset = blockIdx.x * kTile;
  const int valid = n - offset < kTile ? n - offset : kTile;

  Key items[ItemsPerThread];
  // Keys past the end sort last and add nothing: load them as the largest key, count them as 0.
  Load(temp.load).Load(keys + offset, items, valid, ~Key(0));
  __syncthreads();
  Sort(temp.sort).Sort(items);
  __syncthreads();
  Store(temp.store).Store(sorted + offset, items, valid);
  __syncthreads();

  unsigned long long partial = 0;
  for (int i = 0; i < ItemsPerThread; ++i) {
    if (threadIdx.x * ItemsPerThread + i >= valid) items[i] = 0;
    partial += items[i];
  }
  Key scanned[ItemsPerThread];
  Scan(temp.scan).ExclusiveSum(items, scanned);
  __syncthreads();
  Store(temp.store).Store(prefix + offset, scanned, valid);
  __syncthreads();

  const unsigned long long total = Reduce(temp.reduce).Sum(partial);
  if (threadIdx.x == 0) block_totals[blockIdx.x] = total;
}
