#!/bin/sh
# Summarise sales per region: data/sales.csv -> $OUT/summary.csv, the published report.
# Usage: sh pipeline.sh [OUT]   (OUT defaults to out/)
set -eu
OUT=${1:-out}
rm -rf "$OUT"
mkdir -p "$OUT"
echo "region,total" > "$OUT/summary.csv"
tail -n +2 data/sales.csv \
  | awk -F, '{ total[$2] += int($3) } END { for (r in total) print r "," total[r] }' \
  | LC_ALL=C sort >> "$OUT/summary.csv"
