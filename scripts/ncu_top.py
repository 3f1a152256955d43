"""Top SASS instructions by warp-stall samples from `ncu --page source --print-source sass --csv` on stdin."""
import csv, sys
rows = list(csv.reader(sys.stdin))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r))
hdr = rows[hdr_i]
col = next(i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c)
src = next(i for i, c in enumerate(hdr) if c == "Source")
data = [r for r in rows[hdr_i + 1:] if len(r) > max(col, src)]
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
tot = sum(num(r[col]) for r in data)
print("total samples", tot, "instructions", len(data))
for r in sorted(data, key=lambda r: -num(r[col]))[:25]:
    print(f"{num(r[col]):8.0f}  {r[0]:>6}  {r[src][:90]}")
