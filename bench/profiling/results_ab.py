"""Compare `python -m bench --out DIR` runs of two trees row by row: mean of the new runs ÷ mean of the base runs.

    python bench/profiling/results_ab.py --base DIR [DIR ...] --new DIR [DIR ...]

Rows are matched by (section, system, measurement) in each RESULTS.md; a row only one side has is listed apart.
"""

import argparse
import re
import statistics


def rows(path: str) -> dict[tuple[str, str, str], float]:
    """{(section, system, measurement): per second} of one RESULTS.md."""
    out, section = {}, ""
    for line in open(path, encoding="utf-8"):
        if line.startswith("## "):
            section = line[3:].strip()
        m = re.match(r"\| (.+?) \| (.+?) \| ([\d,.]+) \|$", line.strip())
        if m and section:
            out[(section, m.group(1), m.group(2))] = float(m.group(3).replace(",", ""))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", nargs="+", required=True)
    p.add_argument("--new", nargs="+", required=True)
    a = p.parse_args()
    base = [rows(f"{d}/RESULTS.md") for d in a.base]
    new = [rows(f"{d}/RESULTS.md") for d in a.new]
    keys = sorted(set().union(*base) & set().union(*new))
    print("| section | system | measurement | base runs | new runs | new ÷ base |")
    print("|---|---|---|---|---|---:|")
    ratios = []
    for k in keys:
        b = [r[k] for r in base if k in r]
        n = [r[k] for r in new if k in r]
        ratio = statistics.mean(n) / statistics.mean(b)
        ratios.append(ratio)
        print(f"| {k[0]} | {k[1]} | {k[2]} | {' / '.join(f'{x:,.0f}' for x in b)} | "
              f"{' / '.join(f'{x:,.0f}' for x in n)} | {ratio:.2f} |")
    within = sum(0.9 <= r <= 1.1 for r in ratios)
    print(f"\n{len(ratios)} rows: {within} within 0.90-1.10, {sum(r > 1.1 for r in ratios)} above, "
          f"{sum(r < 0.9 for r in ratios)} below")
    only = sorted(set().union(*new) - set().union(*base))
    if only:
        print("\nonly in the new runs:")
        for k in only:
            print(f"| {k[0]} | {k[1]} | {k[2]} | {' / '.join(f'{r[k]:,.0f}' for r in new if k in r)} |")


if __name__ == "__main__":
    main()
