#!/usr/bin/env bash
# make test's runner: the Go tests in the foreground (their output
# streamed), and beside them, in one background lane, the other checks
# (gofmt, vet, the infra checks: one make -k run, their output kept in a
# log and printed once the Go tests end, so the two never interleave). A
# failure in one never stops the other; the run ends with one summary of
# what failed, and fails if anything did.
#
#   test/checks.sh LOGDIR FOREGROUND-TARGET -- LANE-TARGETS...
#
# MAKE is the make to run (the Makefile passes its own).
set -uo pipefail
logs=$1 fg=$2
shift 2
[ "${1:-}" = -- ] && shift
make=${MAKE:-make}
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.rc
start=$SECONDS

lane() {
	local t0=$SECONDS rc=0
	$make -k "$@" >"$logs/lane.log" 2>&1 || rc=$?
	echo "$rc $((SECONDS - t0))" >"$logs/lane.rc"
}
if [ $# -gt 0 ]; then
	lane "$@" &
	lanepid=$!
fi

t0=$SECONDS
$make "$fg" 2>&1 | tee "$logs/$fg.log"
fgrc=${PIPESTATUS[0]}
fgtook=$((SECONDS - t0))

lanerc=0 lanetook=0
if [ $# -gt 0 ]; then
	wait "$lanepid"
	read -r lanerc lanetook <"$logs/lane.rc"
	echo "== $* (beside the Go tests, ${lanetook}s):"
	cat "$logs/lane.log"
fi

echo
echo "== make test: $((SECONDS - start))s"
status() { if [ "$1" = 0 ]; then echo ok; else echo FAIL; fi; }
printf '  %-4s %-12s %4ss\n' "$(status "$fgrc")" "$fg" "$fgtook"
if [ $# -gt 0 ]; then
	printf '  %-4s %-12s %4ss\n' "$(status "$lanerc")" "$*" "$lanetook"
fi
if [ "$fgrc" != 0 ]; then
	# Plain and -json output alike: the failed tests and packages.
	grep -hoE '^(--- FAIL: \S+|FAIL\s+\S+)' "$logs/$fg.log" | sed 's/^/    /' | sort -u
	grep -hoE '"Action":"fail","Package":"[^"]+"(,"Test":"[^"]+")?' "$logs/$fg.log" |
		sed -E 's/"Action":"fail","Package":"([^"]+)"(,"Test":"([^"]+)")?/    FAIL \3 \1/' | sort -u
fi
if [ "$lanerc" != 0 ]; then
	grep -hoE '\*\*\* \[[^]]+\] Error [0-9]+' "$logs/lane.log" | sed 's/^/    /'
fi
[ "$fgrc" = 0 ] && [ "$lanerc" = 0 ]
