// The CPU GEMM: packed panels, cache blocking and the thread split around the micro-kernels of
// cpu/gemm_kernels.h (the Goto/BLIS structure; blocks sized for the L1 of each SIMD build's machines —
// Zen 3's 32 KiB, Zen 5's 48 KiB — and at least 512 KiB of L2).
//
//  - gemm_nt (Y = X·Wᵀ, the forward): the dot kernel. X is packed per depth block, 128 rows at a
//    time; W (HF [out, in] weights: already depth-contiguous) is read in place, never copied. A
//    block of 48 W rows stays in L2 while each 4-row panel of X, in L1, meets it, and the lines
//    of the next W block are requested meanwhile. With few rows (decode) W is the traffic: each
//    thread reads its rows of W once, as three streams front to back, each through its own pages.
//  - gemm_nn (dX = dY·W) and gemm_tn (dW = dYᵀ·X): the outer kernel on panels packed with zero
//    padding; a 256-column block of B in L2, each 16-column panel of it in L1 while the 6-row
//    panels of A pass over it. B comes from memory once per product: the lines of the next block
//    are requested while the current one computes.
//
// Threads split the output into contiguous column ranges on whole cache lines of Y, or row ranges
// when the columns are too few or the other operand is the cheaper one for every thread to pack;
// no two threads write the same cache line of Y but at a row-range boundary. The depth blocking is
// a function of K only, so no result depends on M, on the other rows or on the thread split.
#include "cpu/gemm.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

#include "cpu/gemm_kernels.h"

namespace ad::cpu {
namespace {
using namespace gemm;

// A packed panel that stays in L1 beside the lines of the other operand: 16 KiB of a 32 KiB L1
// (AVX2 machines, Zen 3), 32 KiB of the 48 KiB L1 of the AVX-512 machines this is tuned on (Zen 5).
#if defined(AD_GEMM_AVX512)
constexpr int64_t kPanelBytes = 32 << 10;
#else
constexpr int64_t kPanelBytes = 16 << 10;
#endif
// depth of one dot block: an X panel of kDotRows rows (1024 for AVX2's 4 and AVX-512's 8)
constexpr int64_t kDotDepthBlock = kPanelBytes / (kDotRows * int64_t(sizeof(float)));
constexpr int64_t kDotColBlock = 48;      // W rows staying in L2: 48 × 1024 × 4 B = 192 KiB
constexpr int64_t kDotFewRows = 12;       // up to this many rows (decode), W streams once: dot_few_rows
constexpr int64_t kDotRowChunk = 128;     // rows of X packed at once (512 KiB): X panels stream past the W block
// depth of one outer block: a B panel of kOuterCols columns (256 for AVX2's 16 and AVX-512's 32)
constexpr int64_t kOuterDepthBlock = kPanelBytes / (kOuterCols * int64_t(sizeof(float)));
constexpr int64_t kOuterRowBlock = 72;    // A rows packed at a time: 72 × 256 × 4 B = 72 KiB in L2
constexpr int64_t kOuterColBlock = 256;   // B columns packed at a time: 256 × 256 × 4 B = 256 KiB in L2
// floats of A packed for all rows at once (4 MiB): packed once per depth block and streamed from
// L2/L3 by every column block of B, instead of packed again for each (that re-packing was 10–20%
// of a 512-token backward product here)
constexpr int64_t kOuterPackedRowsMax = 1 << 20;
static_assert(kOuterRowBlock % kOuterRows == 0 && kOuterColBlock % kOuterCols == 0);
constexpr double kCachedBytes = 2 << 20;  // an operand smaller than this is taken to be in cache already
constexpr int64_t kLineFloats = 16;       // one 64-byte cache line of Y: the column split's unit
constexpr double kSerialFlops = 1 << 17;  // below this a product runs on the calling thread alone

// A grow-only, 64-byte aligned scratch buffer; one per thread, so packing never allocates in the
// steady state and no two threads share one.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(data_); }
  float* floats(size_t n) {
    if (n > capacity_) {
      const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      std::free(data_);
      data_ = p;
      capacity_ = bytes / sizeof(float);
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

thread_local Scratch a_panels, b_panels;

struct Range {
  int64_t begin, end;
};

// Part p of `parts` near-equal ranges of [0, n), each boundary on a multiple of `unit`.
Range part_of(int64_t n, int64_t unit, int parts, int p) {
  const int64_t units = (n + unit - 1) / unit;
  return {std::min(n, units * p / parts * unit), std::min(n, units * (p + 1) / parts * unit)};
}

// How a product's output is shared: `parts` ranges of rows or of columns.
struct Split {
  int parts;
  bool by_columns;
};

// Columns unless there are too few of them or (prefer_rows) the other operand is the one every
// thread would then pack; rows on whole row-panel bounds.
Split split_for(const ThreadPool& pool, int64_t rows, int64_t cols, int64_t depth, int64_t row_unit, int64_t col_unit,
                bool prefer_rows) {
  const int threads = pool.size();
  if (threads <= 1 || 2.0 * rows * cols * depth < kSerialFlops) return {1, true};
  const int64_t col_units = (cols + col_unit - 1) / col_unit, row_units = (rows + row_unit - 1) / row_unit;
  const bool columns_fit = col_units >= threads, rows_fit = row_units >= threads;
  if (columns_fit && (!prefer_rows || !rows_fit)) return {threads, true};
  if (rows_fit) return {threads, false};
  return {static_cast<int>(std::max<int64_t>(1, std::max(col_units, row_units))), col_units >= row_units};
}

// Runs body(p) for every part on the pool; the first exception any part throws (a failed
// scratch allocation) is rethrown on the calling thread once all parts are done.
template <class Body>
void run_parts(ThreadPool& pool, int parts, const Body& body) {
  if (parts <= 1) {
    body(0);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  pool.parallel_for(parts, 1, [&](int64_t p0, int64_t p1, int) {
    try {
      for (int64_t p = p0; p < p1; ++p) body(static_cast<int>(p));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

// Asks for the cache lines of a rows × cols tile of Y now, so that they have arrived when the
// tile is stored, after its depth loop (rows of Y are far apart: no prefetcher guesses them).
inline void prefetch_rows(const float* y, int64_t ldy, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    __builtin_prefetch(y + r * ldy, 1, 3);
    __builtin_prefetch(y + r * ldy + cols - 1, 1, 3);
  }
}

// Y = (accumulate ? Y : 0) + bias: the whole product when the depth is zero.
void fill_without_depth(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, bool accumulate) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t n = 0; n < cols; ++n) y[m * ldy + n] = (accumulate ? y[m * ldy + n] : 0.f) + (bias ? bias[n] : 0.f);
}

// An operand of the outer kernel: element (i, k) at p[i·rs + k·ds].
struct Strided {
  const float* p;
  int64_t rs, ds;
};

// Walks the cache lines of the next block of an operand that comes from memory (W of the dot
// kernel, B of the outer one), a few per tile, into L2 while the current block computes; else
// the first pass over a block (or its packing) waits on every line. The block is `rows` rows of
// `floats` contiguous floats, ds apart.
class BlockPrefetch {
 public:
  void aim(Strided src, int64_t rows, int64_t floats, int64_t tiles) {
    // only sources contiguous along a row stream this way
    aim_bytes(src.p, src.ds * int64_t(sizeof(float)), src.rs == 1 ? rows : 0, floats * int64_t(sizeof(float)), tiles);
  }
  // `rows` rows of `row_bytes` contiguous bytes, `stride` bytes apart.
  void aim_bytes(const void* first, int64_t stride, int64_t rows, int64_t row_bytes, int64_t tiles) {
    stride_ = stride;
    lines_per_row_ = (row_bytes + kLineBytes - 1) / kLineBytes;
    left_ = rows * lines_per_row_;
    per_tile_ = tiles > 0 ? (left_ + tiles - 1) / tiles : left_;
    row_ = static_cast<const char*>(first);
    line_ = 0;
  }
  void step() {
    for (int64_t n = std::min(left_, per_tile_); n > 0; --n, --left_) {
      __builtin_prefetch(row_ + line_ * kLineBytes, 0, 2);  // to L2
      if (++line_ == lines_per_row_) line_ = 0, row_ += stride_;
    }
  }

 private:
  static constexpr int64_t kLineBytes = kLineFloats * sizeof(float);
  const char* row_ = nullptr;
  int64_t stride_ = 0, lines_per_row_ = 0, left_ = 0, per_tile_ = 0, line_ = 0;
};

// ------------------------------------------------------------------------------------------ dot

constexpr int64_t kDotStep = kDotRows * kDepthLanes;  // floats of one depth step of a packed X panel
constexpr int64_t kDotColUnit = 48;  // the column split's unit: whole cache lines of Y, whole W panels
static_assert(kDotColUnit % kLineFloats == 0 && kDotColUnit % kDotCols == 0 && kDotColBlock % kDotCols == 0);
static_assert(kDotDepthBlock % kQ8Block == 0);  // a depth block starts on an int8 scale block

template <class W>
struct DotProduct {
  using Weights = W;
  const float* x;
  int64_t ldx;
  W w;  // a weight view of cpu/gemm_kernels.h
  const float* bias;
  float* y;
  int64_t ldy;
  int64_t depth;
  bool accumulate;
};

// Rows [0, rows) (≤ kDotRows) of X, depth [0, depth), into the panel layout [step][row][lane],
// steps `step` floats apart (kDotRows rows of lanes; the few-rows path packs them dense);
// the last step's missing lanes are zero.
void pack_dot_panel(const float* x, int64_t ldx, int rows, int64_t depth, float* panel, int64_t step = kDotStep) {
  const int64_t steps = depth / kDepthLanes;
  const int tail = static_cast<int>(depth % kDepthLanes);
  for (int64_t s = 0; s < steps; ++s)
    for (int r = 0; r < rows; ++r)
      std::memcpy(panel + s * step + r * kDepthLanes, x + r * ldx + s * kDepthLanes, sizeof(float) * kDepthLanes);
  if (tail > 0)
    for (int r = 0; r < rows; ++r) {
      float* dst = panel + steps * step + r * kDepthLanes;
      for (int l = 0; l < kDepthLanes; ++l) dst[l] = l < tail ? x[r * ldx + steps * kDepthLanes + l] : 0.f;
    }
}

// The R × C tile of Y at (m, n) from a packed X panel and W read in place, for one depth block.
template <class W, int R, int C>
void dot_tile_into_y(const DotProduct<W>& p, const float* panel, int64_t m, int64_t n, int64_t k0, int64_t depth) {
  prefetch_rows(p.y + m * p.ldy + n, p.ldy, R, C);
  Sums4 sums[R];
  dot_tile<R, C>(panel, kDepthLanes, kDotStep, p.w.at(n, k0), depth / kDepthLanes, static_cast<int>(depth % kDepthLanes), sums);
  const bool first = k0 == 0;
  for (int r = 0; r < R; ++r) dot_store<C>(p.y + (m + r) * p.ldy + n, sums[r], p.bias ? p.bias + n : nullptr, first, p.accumulate);
}

template <class W>
using DotTileFn = void (*)(const DotProduct<W>&, const float*, int64_t, int64_t, int64_t, int64_t);
// kDotTiles<W>[R − 1][C − 1]: the tile function of every edge shape R × C ≤ kDotRows × kDotCols.
template <class W, int R, size_t... C>
constexpr std::array<DotTileFn<W>, kDotCols> dot_row_of(std::index_sequence<C...>) {
  return {dot_tile_into_y<W, R, static_cast<int>(C) + 1>...};
}
template <class W, size_t... R>
constexpr std::array<std::array<DotTileFn<W>, kDotCols>, kDotRows> dot_tiles(std::index_sequence<R...>) {
  return {dot_row_of<W, static_cast<int>(R) + 1>(std::make_index_sequence<kDotCols>{})...};
}
template <class W>
constexpr auto kDotTiles = dot_tiles<W>(std::make_index_sequence<kDotRows>{});

// ---------------------------------------------------------------------------- dot, few rows

// A view whose row c is row c·apart of `w`: the rows of a few-rows tile, spread over the thread's range.
template <class W>
W rows_apart(W w, int64_t apart) {
  w.ld *= apart;
  return w;
}
inline Q8Weights rows_apart(Q8Weights w, int64_t apart) {
  w.ld *= apart;
  w.scales_ld *= apart;
  return w;
}

// The weight view a few-rows tile reads: the view itself, or for int8 one whose tile's scales
// were widened to f32 once into `scales` (rows kDotDepthBlock / kQ8Block apart).
template <class W>
W tile_view(const W& w, int, int64_t, float*) {
  return w;
}
inline Q8WideScales tile_view(const Q8Weights& w, int cols, int64_t depth, float* scales) {
  constexpr int64_t kScalesLd = kDotDepthBlock / kQ8Block;
  widen_rows(F16Weights{w.d, w.scales_ld}, cols, (depth + kQ8Block - 1) / kQ8Block, scales, kScalesLd);  // the scales are f16
  return {w.q, scales, w.ld, kScalesLd};
}

// One R × C tile of Y at rows m.. and columns n, n + apart, … over depth block k0 from a dense X
// panel (a_step = R lanes).
template <class W, int R, int C>
void few_rows_tile(const DotProduct<W>& p, const float* panel, int64_t m, int64_t n, int64_t apart, int64_t k0, int64_t depth) {
  float scales[kDotCols * (kDotDepthBlock / kQ8Block)];
  Sums4 sums[R];
  dot_tile<R, C>(panel, kDepthLanes, R * kDepthLanes, tile_view(rows_apart(p.w.at(n, k0), apart), C, depth, scales),
                 depth / kDepthLanes, static_cast<int>(depth % kDepthLanes), sums);
  const bool first = k0 == 0;
  for (int r = 0; r < R; ++r)
    dot_store_apart<C>(p.y + (m + r) * p.ldy + n, apart, sums[r], p.bias ? p.bias + n : nullptr, first, p.accumulate);
}

template <class W, int R>
void few_rows_tile(const DotProduct<W>& p, const float* panel, int64_t m, int64_t n, int cols, int64_t apart, int64_t k0, int64_t depth) {
  static_assert(kDotCols == 3);
  if (cols == 3) return few_rows_tile<W, R, 3>(p, panel, m, n, apart, k0, depth);
  if (cols == 2) return few_rows_tile<W, R, 2>(p, panel, m, n, apart, k0, depth);
  few_rows_tile<W, R, 1>(p, panel, m, n, apart, k0, depth);
}

template <class W, size_t... R>
void few_rows_tile(const DotProduct<W>& p, int rows, const float* panel, int64_t m, int64_t n, int cols, int64_t apart, int64_t k0,
                   int64_t depth, std::index_sequence<R...>) {
  // the tile of `rows` rows (1 .. kDotRows), picked at run time among the compiled ones
  (void)((rows == static_cast<int>(R) + 1 ? (few_rows_tile<W, static_cast<int>(R) + 1>(p, panel, m, n, cols, apart, k0, depth), true) : false) ||
         ...);
}

// Y rows `rows` (≤ kDotFewRows) × columns `cols`: X is packed whole, each panel dense (kDotRows
// rows, or the rows left, per step), and each tile walks its whole depth, block after block,
// before the next. A tile's kDotCols columns lie a third of the thread's range apart, so the
// thread reads W as kDotCols streams, each front to back through its own pages: the hardware
// prefetchers follow one stream per 4 KiB page, and adjacent W rows of 1–4 KiB share pages
// (measured, Qwen3-0.6B's shapes at batch 1 on 2 threads, the same process alternating: decode
// 7% faster over bf16 and int8 weights and 17% over f32 than adjacent rows with their lines
// requested 16 KiB ahead in software; adjacent rows with no requests: 27% slower still).
// The depth blocks are those of dot_rows, so every sum has the same order and the same bits.
template <class W>
void dot_few_rows(const DotProduct<W>& p, Range rows, Range cols) {
  const int64_t M = rows.end - rows.begin, steps = (p.depth + kDepthLanes - 1) / kDepthLanes;
  const int64_t panels = (M + kDotRows - 1) / kDotRows, panel_floats = steps * kDotStep;
  float* packed = a_panels.floats(static_cast<size_t>(panels * panel_floats));
  for (int64_t q = 0; q < panels; ++q) {
    const int here = static_cast<int>(std::min<int64_t>(kDotRows, M - q * kDotRows));
    pack_dot_panel(p.x + (rows.begin + q * kDotRows) * p.ldx, p.ldx, here, p.depth, packed + q * panel_floats, here * kDepthLanes);
  }
  const int64_t width = cols.end - cols.begin, apart = (width + kDotCols - 1) / kDotCols;
  for (int64_t i = 0; i < apart; ++i) {
    const int64_t n = cols.begin + i;
    const int c = static_cast<int>(std::min<int64_t>(kDotCols, (width - i + apart - 1) / apart));  // columns n + j·apart in range
    for (int64_t k0 = 0; k0 < p.depth; k0 += kDotDepthBlock) {
      const int64_t depth = std::min(kDotDepthBlock, p.depth - k0);
      for (int64_t q = 0; q < panels; ++q) {
        const int here = static_cast<int>(std::min<int64_t>(kDotRows, M - q * kDotRows));
        const float* panel = packed + q * panel_floats + (k0 / kDepthLanes) * here * kDepthLanes;
        few_rows_tile(p, here, panel, rows.begin + q * kDotRows, n, c, apart, k0, depth, std::make_index_sequence<kDotRows>{});
      }
    }
  }
}

// ---------------------------------------------------------------------------- dot, many rows

// Y rows `rows` × columns `cols`. Per depth block: X is packed once; a block of W rows (read in
// place) stays in L2 while each 4-row panel of X, in turn, stays in L1 and meets its 3-row panels,
// and the next W block is requested meanwhile.
template <class W>
void dot_rows(const DotProduct<W>& p, Range rows, Range cols) {
  if (rows.end - rows.begin <= kDotFewRows) return dot_few_rows(p, rows, cols);
  const int64_t panel_floats = (kDotDepthBlock / kDepthLanes) * kDotStep;
  const int64_t panels = (rows.end - rows.begin + kDotRows - 1) / kDotRows;
  float* packed = a_panels.floats(static_cast<size_t>(panels * panel_floats));
  BlockPrefetch next_w;
  // The tile at (m, n) of the product q (p, or p over a widened W block).
  const auto tile = [&](const auto& q, int64_t m, int64_t n, int64_t ne, int64_t k0, int64_t depth) {
    using Q = typename std::decay_t<decltype(q)>::Weights;
    kDotTiles<Q>[std::min<int64_t>(kDotRows, rows.end - m) - 1][std::min<int64_t>(kDotCols, ne - n) - 1](q, packed + (m - rows.begin) / kDotRows * panel_floats, m, n, k0, depth);
  };
  for (int64_t k0 = 0; k0 < p.depth; k0 += kDotDepthBlock) {
    const int64_t depth = std::min(kDotDepthBlock, p.depth - k0);
    for (int64_t m = rows.begin; m < rows.end; m += kDotRows)
      pack_dot_panel(p.x + m * p.ldx + k0, p.ldx, static_cast<int>(std::min<int64_t>(kDotRows, rows.end - m)), depth,
                     packed + (m - rows.begin) / kDotRows * panel_floats);
    for (int64_t nb = cols.begin; nb < cols.end; nb += kDotColBlock) {
      const int64_t ne = std::min(cols.end, nb + kDotColBlock);
      {  // the next W block: the next rows of W, else the first ones of the next depth block
        const int64_t next_n = ne < cols.end ? ne : cols.begin, next_k0 = ne < cols.end ? k0 : k0 + kDotDepthBlock;
        const int64_t tiles = (rows.end - rows.begin + kDotRows - 1) / kDotRows * ((ne - nb + kDotCols - 1) / kDotCols);
        if (next_k0 < p.depth)
          next_w.aim_bytes(p.w.address(next_n, next_k0), p.w.ld * W::kBytes, std::min(kDotColBlock, cols.end - next_n),
                           std::min(kDotDepthBlock, p.depth - next_k0) * W::kBytes, tiles);
        else
          next_w.aim_bytes(nullptr, 0, 0, 0, 0);
      }
      const auto tiles_of = [&](const auto& q) {
        for (int64_t m = rows.begin; m < rows.end; m += kDotRows)
          for (int64_t n = nb; n < ne; n += kDotCols) {
            next_w.step();
            tile(q, m, n, ne, k0, depth);
          }
      };
      if constexpr (std::is_same_v<W, F32Weights>) {
        tiles_of(p);
      } else {  // many X panels meet this W block: widen it once into L2, not once per panel
        float* widened = b_panels.floats(static_cast<size_t>(kDotColBlock * kDotDepthBlock));
        widen_rows(p.w.at(nb, k0), static_cast<int>(ne - nb), depth, widened, kDotDepthBlock);
        tiles_of(DotProduct<WidenedBlock>{p.x, p.ldx, {widened, kDotDepthBlock, nb, k0}, p.bias, p.y, p.ldy, p.depth, p.accumulate});
      }
    }
  }
}

// At most kDotRowChunk rows at a time, so the packed X (one chunk × one depth block) stays small.
template <class W>
void dot_part(const DotProduct<W>& p, Range rows, Range cols) {
  for (int64_t m = rows.begin; m < rows.end; m += kDotRowChunk) dot_rows(p, {m, std::min(rows.end, m + kDotRowChunk)}, cols);
}

// ---------------------------------------------------------------------------------------- outer

struct OuterProduct {
  Strided a;      // rows of Y × depth
  Strided b;      // columns of Y × depth
  float* y;
  int64_t ldy;
  int64_t depth;
  bool accumulate;
};

// Operand rows [0, rows) × depth [0, depth) into P-wide panels for outer_tile: panel q holds rows
// [qP, qP + P) as panel[k·P + i] (rows past the end are zero), panels one after another. Reads
// follow memory: along a row of the source when its rows are contiguous (rs = 1), else along
// the depth of each row, so the hardware prefetchers see streams.
template <int P>
void pack_outer_block(Strided src, int64_t rows, int64_t depth, float* panels) {
  const int64_t count = (rows + P - 1) / P;
  if (src.rs == 1) {
    for (int64_t k = 0; k < depth; ++k) {
      const float* s = src.p + k * src.ds;
      for (int64_t q = 0; q < count; ++q) {
        float* d = panels + q * P * depth + k * P;
        const int64_t here = std::min<int64_t>(P, rows - q * P);
        if (here == P) {
          std::memcpy(d, s + q * P, sizeof(float) * P);
        } else {
          for (int64_t i = 0; i < here; ++i) d[i] = s[q * P + i];
          for (int64_t i = here; i < P; ++i) d[i] = 0.f;
        }
      }
    }
    return;
  }
  for (int64_t q = 0; q < count; ++q) {
    float* d = panels + q * P * depth;
    const int64_t here = std::min<int64_t>(P, rows - q * P);
    for (int64_t i = 0; i < here; ++i) {
      const float* s = src.p + (q * P + i) * src.rs;
      for (int64_t k = 0; k < depth; ++k) d[k * P + i] = s[k * src.ds];
    }
    for (int64_t i = here; i < P; ++i)
      for (int64_t k = 0; k < depth; ++k) d[k * P + i] = 0.f;
  }
}

Strided offset(Strided s, int64_t i, int64_t k) { return {s.p + i * s.rs + k * s.ds, s.rs, s.ds}; }

// Y rows `rows` × columns `cols`. Per depth block: A is packed once (all its rows when they fit
// in kOuterPackedRowsMax, else a row block at a time, again for each block of B); a block of B
// columns is packed into L2; each kOuterCols-column panel of it stays in L1 while the
// kOuterRows-row panels of A pass over it.
void outer_part(const OuterProduct& p, Range rows, Range cols) {
  const int64_t row_count = rows.end - rows.begin;
  const int64_t all_rows_floats = (row_count + kOuterRows - 1) / kOuterRows * kOuterRows * kOuterDepthBlock;
  const bool pack_all_rows = all_rows_floats <= kOuterPackedRowsMax;
  // when A is packed a row block at a time, one block of all of B's columns (where it fits) has
  // each row block packed once per depth block, not once per column block (dW of an LM head)
  const int64_t all_cols = (cols.end - cols.begin + kOuterCols - 1) / kOuterCols * kOuterCols;
  const int64_t col_block = !pack_all_rows && all_cols * kOuterDepthBlock <= kOuterPackedRowsMax ? all_cols : kOuterColBlock;
  float* ap = a_panels.floats(static_cast<size_t>(pack_all_rows ? all_rows_floats : kOuterRowBlock * kOuterDepthBlock));
  float* bp = b_panels.floats(static_cast<size_t>(col_block * kOuterDepthBlock));
  OuterAcc acc;
  BlockPrefetch next_b;
  const bool b_streams_from_memory = static_cast<double>(cols.end - cols.begin) * p.depth * sizeof(float) > kCachedBytes;
  for (int64_t k0 = 0; k0 < p.depth; k0 += kOuterDepthBlock) {
    const int64_t depth = std::min(kOuterDepthBlock, p.depth - k0);
    const bool first = k0 == 0;
    if (pack_all_rows) pack_outer_block<kOuterRows>(offset(p.a, rows.begin, k0), row_count, depth, ap);
    for (int64_t nb = cols.begin; nb < cols.end; nb += col_block) {
      const int64_t ne = std::min(cols.end, nb + col_block);
      pack_outer_block<kOuterCols>(offset(p.b, nb, k0), ne - nb, depth, bp);
      {  // the next block: the next columns, else the first columns of the next depth block
        const int64_t next_nb = ne < cols.end ? ne : cols.begin, next_k0 = ne < cols.end ? k0 : k0 + kOuterDepthBlock;
        const int64_t tiles = (ne - nb + kOuterCols - 1) / kOuterCols * ((row_count + kOuterRows - 1) / kOuterRows);
        if (next_k0 < p.depth && b_streams_from_memory)
          next_b.aim(offset(p.b, next_nb, next_k0), std::min(kOuterDepthBlock, p.depth - next_k0),
                     std::min(col_block, cols.end - next_nb), tiles);
        else
          next_b.aim(p.b, 0, 0, 0);
      }
      for (int64_t mb = rows.begin; mb < rows.end; mb += kOuterRowBlock) {
        const int64_t me = std::min(rows.end, mb + kOuterRowBlock);
        const float* a_block = ap + (pack_all_rows ? (mb - rows.begin) * depth : 0);
        if (!pack_all_rows) pack_outer_block<kOuterRows>(offset(p.a, mb, k0), me - mb, depth, ap);
        for (int64_t n = nb; n < ne; n += kOuterCols) {
          const int cols_here = static_cast<int>(std::min<int64_t>(kOuterCols, ne - n));
          for (int64_t m = mb; m < me; m += kOuterRows) {
            const int rows_here = static_cast<int>(std::min<int64_t>(kOuterRows, me - m));
            prefetch_rows(p.y + m * p.ldy + n, p.ldy, rows_here, cols_here);
            next_b.step();
            outer_tile(a_block + (m - mb) * depth, bp + (n - nb) * depth, depth, acc);
            for (int r = 0; r < rows_here; ++r) outer_store_row(p.y + (m + r) * p.ldy + n, acc.v[r], cols_here, first, p.accumulate);
          }
        }
      }
    }
  }
}

void outer_gemm(ThreadPool& pool, const OuterProduct& p, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (p.depth <= 0) {
    fill_without_depth(p.y, p.ldy, rows, cols, nullptr, p.accumulate);
    return;
  }
  // Split by columns and every thread packs all of A; by rows and every thread packs all of B.
  const Split split = split_for(pool, rows, cols, p.depth, kOuterRows, kLineFloats, /*prefer_rows=*/rows > cols);
  run_parts(pool, split.parts, [&](int part) {
    const Range r = split.by_columns ? Range{0, rows} : part_of(rows, kOuterRows, split.parts, part);
    const Range c = split.by_columns ? part_of(cols, kLineFloats, split.parts, part) : Range{0, cols};
    if (r.begin < r.end && c.begin < c.end) outer_part(p, r, c);
  });
}

// Y[M×N] (=|+=) X·Wᵀ (+ bias). W is read in place, never packed: split by columns (each thread
// packs all of X) unless the columns are too few to share.
template <class W>
void dot_gemm(ThreadPool& pool, const DotProduct<W>& p, int64_t M, int64_t N) {
  if (M <= 0 || N <= 0) return;
  if (p.depth <= 0) {
    fill_without_depth(p.y, p.ldy, M, N, p.bias, p.accumulate);
    return;
  }
  // few rows: W's rows are the work, shared out by the cache line of Y (48-row units left one of 2
  // threads 6% more of Qwen3-0.6B's 1024- and 2048-row projections)
  const int64_t col_unit = M <= kDotFewRows ? kLineFloats : kDotColUnit;
  const Split split = split_for(pool, M, N, p.depth, kDotRows, col_unit, /*prefer_rows=*/false);
  run_parts(pool, split.parts, [&](int part) {
    const Range r = split.by_columns ? Range{0, M} : part_of(M, kDotRows, split.parts, part);
    const Range c = split.by_columns ? part_of(N, col_unit, split.parts, part) : Range{0, N};
    if (r.begin < r.end && c.begin < c.end) dot_part(p, r, c);
  });
}

}  // namespace

const char* gemm_kernel() { return kernel_name(); }

void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias, float* Y,
             int64_t ldy, int64_t M, int64_t N, int64_t K, bool accumulate) {
  dot_gemm(pool, DotProduct<F32Weights>{X, ldx, {W, ldw}, bias, Y, ldy, K, accumulate}, M, N);
}

void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const WeightMatrix& W, const float* bias, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate) {
  switch (W.type) {
    case WeightType::kF32:
      return gemm_nt(pool, X, ldx, static_cast<const float*>(W.data), W.ld, bias, Y, ldy, M, N, K, accumulate);
    case WeightType::kBF16:
      return dot_gemm(pool, DotProduct<Bf16Weights>{X, ldx, {static_cast<const uint16_t*>(W.data), W.ld}, bias, Y, ldy, K, accumulate}, M, N);
    case WeightType::kF16:
      return dot_gemm(pool, DotProduct<F16Weights>{X, ldx, {static_cast<const uint16_t*>(W.data), W.ld}, bias, Y, ldy, K, accumulate}, M, N);
    case WeightType::kQ8:
      return dot_gemm(pool, DotProduct<Q8Weights>{X, ldx, {static_cast<const int8_t*>(W.data), W.scales, W.ld, W.scales_ld}, bias, Y, ldy, K, accumulate},
                      M, N);
  }
}

void gemm_nn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate) {
  // Y[M×K] = X[M×N]·W[N×K]: rows M, columns K, depth N.
  outer_gemm(pool, OuterProduct{{X, ldx, 1}, {W, 1, ldw}, Y, ldy, N, accumulate}, M, K);
}

void gemm_tn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate) {
  // Y[M×N] = X[K×M]ᵀ·W[K×N]: rows M, columns N, depth K.
  outer_gemm(pool, OuterProduct{{X, 1, ldx}, {W, 1, ldw}, Y, ldy, K, accumulate}, M, N);
}

}  // namespace ad::cpu
