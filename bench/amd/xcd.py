"""Work-group order across MI300X's eight XCDs, by arithmetic: which A row
panels and B column panels each XCD's L2 must fill per k step of a GEMM
grid, in the order rocmc launches (blockIdx.x the column tile, fastest)
against the least any order could fill (each XCD one compact block), and the
fill bandwidth both need beside the matrix time of one k step.

The hardware dispatches work-group w to XCD w % 8 (AMD's MI300X tuning
guide); each XCD has its own L2 (4 MB), the Infinity Cache (MALL) and HBM
behind them. Usage: python3 bench/amd/xcd.py  (prints a table)."""

XCDS, CUS = 8, 304
# MI300X dense f16 rate and the fabric behind the L2s.
TFLOPS, MALL_TBS, HBM_TBS = 1307.0, 17.2, 5.3


def panels(ids, cols):
    rows = {w // cols for w in ids}
    cs = {w % cols for w in ids}
    return len(rows), len(cs)


def best_block(per, rows, cols, slice_a, slice_b):
    """The least an XCD holding `per` tiles can fill: its tiles one
    compact block of r rows by ceil(per / r) columns (no order beats it)."""
    return min(r * slice_a + min(cols, -(-per // r)) * slice_b
               for r in range(1, rows + 1) if r * cols >= per)


def case(m, n, k, bm, bn, bk, esize=2):
    rows, cols = m // bm, n // bn
    resident = min(rows * cols, CUS)     # one work-group per CU (LDS)
    slice_a, slice_b = bm * bk * esize, bn * bk * esize
    step_s = 2 * bm * bn * bk / (TFLOPS * 1e12 / CUS)
    fills = 0
    for x in range(XCDS):
        pr, pc = panels([w for w in range(resident) if w % XCDS == x], cols)
        fills += pr * slice_a + pc * slice_b
    ideal = XCDS * best_block(-(-resident // XCDS), rows, cols, slice_a, slice_b)
    out = [(name, f / XCDS / 1024, f / step_s / 1e12)
           for name, f in [("launch order", fills), ("best block per XCD (bound)", ideal)]]
    uniq = (rows * slice_a + cols * slice_b) / step_s / 1e12
    return out, uniq, step_s


if __name__ == "__main__":
    print("| GEMM | order | L2 fill per XCD per k step (KiB) | fill rate, all XCDs (TB/s) | MALL peak | unique (HBM) TB/s |")
    print("|---|---|---|---|---|---|")
    for shape in [(4096, 4096, 4096, 256, 256, 32), (8192, 8192, 8192, 256, 256, 32)]:
        out, uniq, _ = case(*shape)
        for name, kib, tbs in out:
            print(f"| {shape[0]}x{shape[1]}x{shape[2]}, {shape[3]}x{shape[4]} tiles | {name} | {kib:.0f} | {tbs:.2f} | {MALL_TBS} | {uniq:.2f} |")
