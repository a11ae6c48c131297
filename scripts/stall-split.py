#!/usr/bin/env python3
"""Splits a kernel's warp-stall samples (scripts/profile-mma.sh --sass,
KERNEL.source.csv or .csv.gz) into before the first barrier, between the
first and last (the staged k loop), and after the last (the epilogue)."""
import csv
import gzip
import sys

path = sys.argv[1]
opener = gzip.open if path.endswith(".gz") else open
with opener(path, "rt") as f:
    lines = [l for l in f if l.startswith('"')]
rows = list(csv.reader(lines))
start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
head, rows = rows[start], rows[start:]
src, samples = head.index("Source"), head.index("Warp Stall Sampling (All Samples)")
body = [r for r in rows[1:] if len(r) > samples and r[samples].isdigit()]
bars = [i for i, r in enumerate(body) if "BAR.SYNC" in r[src]]
total = sum(int(r[samples]) for r in body)
part = lambda rs: 100.0 * sum(int(r[samples]) for r in rs) / max(total, 1)
first, last = bars[0], bars[-1]
print(f"samples {total}")
print(f"before the first barrier {part(body[:first]):.1f} %")
print(f"k loop (first to last barrier) {part(body[first:last + 1]):.1f} %")
print(f"epilogue (after the last barrier) {part(body[last + 1:]):.1f} %")
