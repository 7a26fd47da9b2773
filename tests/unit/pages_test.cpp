#include "core/pages.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

using basalt::PageBuffer;

// Turns huge pages on for one test (they are off by default) and back to what they were.
struct HugePagesOn {
  bool was = basalt::huge_pages_wanted();
  HugePagesOn() { basalt::set_huge_pages_wanted(true); }
  ~HugePagesOn() { basalt::set_huge_pages_wanted(was); }
};

// Every size comes back zero-filled, writable to its last byte, at least 64-byte aligned; blocks
// of 2 MB and more that ask for huge pages start on a 2 MB boundary (huge pages turned on).
TEST(Pages, BlocksAreZeroAlignedAndWritable) {
  HugePagesOn on;
  for (size_t bytes : {size_t(1), size_t(100), basalt::kMapThresholdBytes - 1, basalt::kMapThresholdBytes,
                       size_t(2) << 20, (size_t(3) << 20) + 5, size_t(9) << 20}) {
    auto* p = static_cast<unsigned char*>(basalt::alloc_pages(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(p[i], 0) << bytes << " at " << i;
    ASSERT_EQ(p[bytes - 1], 0);
    std::memset(p, 0xab, bytes);
    EXPECT_EQ(p[bytes - 1], 0xab);
    basalt::free_pages(p, bytes);
    if (bytes < basalt::kMapThresholdBytes) continue;
    for (bool huge : {false, true}) {
      auto* q = static_cast<unsigned char*>(basalt::map_pages(bytes, huge));
      ASSERT_NE(q, nullptr) << bytes;
      if (huge && bytes >= (size_t(2) << 20))
        EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % (uintptr_t(2) << 20), 0u) << bytes;
      ASSERT_EQ(q[0], 0);
      ASSERT_EQ(q[bytes - 1], 0);
      std::memset(q, 0xcd, bytes);
      EXPECT_EQ(q[bytes / 2], 0xcd);
      basalt::unmap_pages(q, bytes);
    }
  }
}

// reset() gives fresh zeros even over old contents; copies are deep; moves leave the source empty.
TEST(Pages, PageBufferSemantics) {
  PageBuffer<float> a(1 << 20);  // 4 MB: mapped, huge pages
  ASSERT_EQ(a.size(), size_t(1) << 20);
  for (size_t i = 0; i < a.size(); i += 1000) ASSERT_EQ(a[i], 0.f);
  a[7] = 3.f;
  a[a.size() - 1] = 5.f;
  PageBuffer<float> b = a;
  EXPECT_EQ(b[7], 3.f);
  EXPECT_EQ(b[b.size() - 1], 5.f);
  b[7] = 4.f;
  EXPECT_EQ(a[7], 3.f);
  PageBuffer<float> c = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(c[7], 3.f);
  c.reset(10);  // small: heap, still zero
  ASSERT_EQ(c.size(), 10u);
  for (float v : c) EXPECT_EQ(v, 0.f);
  c.reset(0);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.data(), nullptr);
}

// Inside a RecycleScope, freed blocks are parked and new blocks are built from their pages: every
// block still comes back zero-filled and writable to its end (also one larger than all parked
// pages together, and one made of several parked blocks); closing the last scope unmaps what is
// still parked. Outside a scope nothing is parked.
TEST(Pages, RecycledBlocksAreZeroFilled) {
  const size_t MB = size_t(1) << 20;
  auto filled = [](size_t bytes, unsigned char v) {
    auto* p = static_cast<unsigned char*>(basalt::alloc_pages(bytes));
    EXPECT_NE(p, nullptr);
    if (p) std::memset(p, v, bytes);
    return p;
  };
  auto all_zero = [](const unsigned char* p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 511)
      if (p[i]) return false;
    return p[bytes - 1] == 0;
  };
  const size_t before = basalt::recycle_stats().reused_bytes;
  {
    basalt::RecycleScope scope;
    unsigned char* a = filled(3 * MB + 100, 0x11);
    unsigned char* b = filled(2 * MB, 0x22);
    basalt::free_pages(a, 3 * MB + 100);
    basalt::free_pages(b, 2 * MB);
    EXPECT_GE(basalt::recycle_stats().parked_bytes, 5 * MB);
    {
      basalt::RecycleScope nested;  // nesting keeps the parked blocks
    }
    EXPECT_GE(basalt::recycle_stats().parked_bytes, 5 * MB);
    // smaller than a parked block: part of it; the rest stays parked
    auto* c = static_cast<unsigned char*>(basalt::alloc_pages(MB + 7));
    ASSERT_NE(c, nullptr);
    EXPECT_TRUE(all_zero(c, MB + 7));
    std::memset(c, 0x33, MB + 7);
    // larger than what is left parked: parked pages plus fresh ones
    const size_t big = 9 * MB + 3;
    auto* d = static_cast<unsigned char*>(basalt::alloc_pages(big));
    ASSERT_NE(d, nullptr);
    EXPECT_TRUE(all_zero(d, big));
    std::memset(d, 0x44, big);
    EXPECT_EQ(d[big - 1], 0x44);
    EXPECT_EQ(c[MB], 0x33);  // the blocks do not overlap
    EXPECT_EQ(basalt::recycle_stats().parked_bytes, 0u);
    EXPECT_GE(basalt::recycle_stats().reused_bytes - before, 5 * MB);
    basalt::free_pages(c, MB + 7);
    basalt::free_pages(d, big);
    // below kRecycleMinBytes a block is unmapped at once
    unsigned char* e = filled(basalt::kRecycleMinBytes / 2, 0x55);
    const size_t parked = basalt::recycle_stats().parked_bytes;
    basalt::free_pages(e, basalt::kRecycleMinBytes / 2);
    EXPECT_EQ(basalt::recycle_stats().parked_bytes, parked);
  }
  EXPECT_EQ(basalt::recycle_stats().parked_bytes, 0u);
  unsigned char* f = filled(4 * MB, 0x66);
  basalt::free_pages(f, 4 * MB);
  EXPECT_EQ(basalt::recycle_stats().parked_bytes, 0u);
}

// grow_pages keeps the block's contents (its pages move with it), zero-fills what it adds, and
// places a huge block on a 2 MB boundary (populated at once or not): small -> small, small -> huge, huge -> huge, and a
// size that is not a whole number of pages. A block whose pages came from several parked blocks
// (several mappings) either grows the same way or is refused and left as it was.
TEST(Pages, GrowKeepsContentsAndZeroFillsTheRest) {
  HugePagesOn on;
  const size_t MB = size_t(1) << 20;
  const std::pair<size_t, size_t> steps[] = {{256 << 10, MB + 5}, {MB, 5 * MB}, {4 * MB, 11 * MB + 3}, {6 * MB, 6 * MB + 1}};
  for (bool huge : {false, true})
    for (bool populate : {false, true})
    for (auto [from, to] : steps) {
      auto* p = static_cast<unsigned char*>(basalt::map_pages(from, huge, populate));
      ASSERT_NE(p, nullptr);
      for (size_t i = 0; i < from; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
      auto* q = static_cast<unsigned char*>(basalt::grow_pages(p, from, to, huge, populate));
      ASSERT_NE(q, nullptr) << from << " -> " << to << (huge ? " huge" : "");
      if (huge && to >= 2 * MB)
        EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % (2 * MB), 0u) << from << " -> " << to;
      size_t bad = 0;
      for (size_t i = 0; i < from; ++i) bad += q[i] != static_cast<unsigned char>(i * 7 + 1);
      EXPECT_EQ(bad, 0u) << from << " -> " << to;
      for (size_t i = from; i < to; ++i) bad += q[i] != 0;
      EXPECT_EQ(bad, 0u) << "added bytes not zero, " << from << " -> " << to;
      std::memset(q, 0xee, to);  // writable to the end
      basalt::unmap_pages(q, to);
    }
  // Not larger, or no block: refused.
  auto* p = basalt::map_pages(MB, false);
  EXPECT_EQ(basalt::grow_pages(p, MB, MB, false), nullptr);
  EXPECT_EQ(basalt::grow_pages(nullptr, 0, MB, false), nullptr);
  basalt::unmap_pages(p, MB);
  {
    basalt::RecycleScope scope;
    auto* a = basalt::alloc_pages(MB);
    auto* b = basalt::alloc_pages(MB);
    basalt::free_pages(a, MB);
    basalt::free_pages(b, MB);
    auto* c = static_cast<unsigned char*>(basalt::map_pages(2 * MB, false));  // two parked blocks
    ASSERT_NE(c, nullptr);
    std::memset(c, 0x5a, 2 * MB);
    auto* d = static_cast<unsigned char*>(basalt::grow_pages(c, 2 * MB, 3 * MB, false));
    if (d) {
      EXPECT_EQ(d[0], 0x5a);
      EXPECT_EQ(d[2 * MB - 1], 0x5a);
      EXPECT_EQ(d[3 * MB - 1], 0);
      basalt::unmap_pages(d, 3 * MB);
    } else {
      EXPECT_EQ(c[2 * MB - 1], 0x5a);  // refused: the old block is untouched
      basalt::unmap_pages(c, 2 * MB);
    }
  }
}

// Pages of [p, p + bytes) that are resident (mincore).
static size_t resident_pages(const void* p, size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> v((bytes + page - 1) / page);
  if (mincore(const_cast<void*>(p), bytes, v.data()) != 0) return ~size_t(0);
  size_t n = 0;
  for (unsigned char c : v) n += c & 1;
  return n;
}

// populate_pages faults in exactly the pages its range touches (an unaligned start and end
// included) and keeps what they hold.
TEST(Pages, PopulatePagesFaultsInTheRangeAndKeepsContents) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), len = 64 * page;
  auto* p = static_cast<unsigned char*>(basalt::map_pages(len, false, /*populate=*/false));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(resident_pages(p, len), 0u);
  p[5 * page + 7] = 0x77;  // one page written before
  basalt::populate_pages(p + 3 * page + 100, 10 * page);  // pages 3..13
  EXPECT_EQ(resident_pages(p, len), 11u);
  EXPECT_EQ(resident_pages(p + 3 * page, 11 * page), 11u);
  EXPECT_EQ(p[5 * page + 7], 0x77);
  EXPECT_EQ(p[3 * page + 100], 0);
  EXPECT_EQ(p[13 * page + 99], 0);
  basalt::populate_pages(p, 0);  // nothing
  basalt::populate_pages(nullptr, page);
  EXPECT_EQ(resident_pages(p, len), 11u);
  basalt::unmap_pages(p, len);
}
