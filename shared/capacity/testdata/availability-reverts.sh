#!/usr/bin/env bash
# Each rule of the availability search reverted alone (docs/capacity.md,
# "The property test"): which of seeds 1..SEEDS (default 32) of
# TestAvailabilityProperty fail. Run from the repository root on a clean
# tree; it restores availability_search.go when done.
set -euo pipefail
f=shared/capacity/availability_search.go
seeds=${SEEDS:-32}
cp "$f" "$f.orig"
trap 'mv "$f.orig" "$f"' EXIT
revert() {
  cp "$f.orig" "$f"
  sed -i "$2" "$f"
  if cmp -s "$f" "$f.orig"; then echo "$1: the patch no longer applies" >&2; exit 1; fi
  echo "$1: $(BC_AVAIL_SEEDS=$seeds go test -count=1 ./shared/capacity -run TestAvailabilityProperty 2>&1 |
    grep -- '--- FAIL: TestAvailabilityProperty/' | grep -o 'seed-[0-9]*' | tr '\n' ' ')"
}
revert "out-of-service nodes not skipped" 's/\t\t\toutBits.set(k)/\t\t\t_ = k/'
revert "a node stored in an hour not provisioned counted as free" '/\t\t\t\t\t\tvacant\[j\] &^= r.stored\[j\]/d'
revert "free devices not intersected over the window's hours" 's/known(k, int(kStart\[k\]), i, partial\[k\] > 0)/known(k, int(kStart[k]), i, false)/'
revert "a read cut short taken as complete" 's/\t\t\t\tif !r.more \&\& r.floor <= s.need {/\t\t\t\tif true {/'
revert "an hour read for whole free nodes only taken as complete for fewer devices" 's/\t\t\t\tif !r.more \&\& r.floor <= s.need {/\t\t\t\tif !r.more {/'
