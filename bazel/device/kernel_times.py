#!/usr/bin/env python3
"""Sums Nsight Compute's per-launch gpu__time_duration by kernel name.

  kernel_times.py NCU_CSV [STEPS]

NCU_CSV is `ncu --metrics gpu__time_duration.sum --csv` output (one
row per launch); STEPS (default 2) divides the totals into a step's share. Prints the
kernels by total time, longest first, with launches and share of the whole.
"""
import collections
import csv
import re
import sys


def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("void ", "")
    name = re.sub(r"\(.*", "", name)          # arguments
    name = re.sub(r"^[\w:]*::", "", name)     # namespaces
    return name[:70]


def main():
    path = sys.argv[1]
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    if not lines:
        print(f"no CSV rows in {path}")
        return
    total = collections.Counter()
    count = collections.Counter()
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0,
                 "ms": 1.0, "second": 1e3}.get(unit, 1e-6)
        name = short(row.get("Kernel Name", "?"))
        total[name] += value * scale
        count[name] += 1
    whole = sum(total.values())
    print(f"{sum(count.values())} launches, {whole:.2f} ms of kernels over {steps} steps "
          f"({whole / steps:.2f} ms a step)")
    for name, ms in total.most_common():
        print(f"{ms / steps:8.3f} ms/step {100 * ms / whole:5.1f}% "
              f"{count[name] // steps:5d}x  {name}")


if __name__ == "__main__":
    main()
