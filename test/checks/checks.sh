#!/usr/bin/env bash
# make test's runner: the Go tests in the foreground (their output
# streamed), and beside them the other checks in background lanes, each
# lane one make -k run of its targets in order (gofmt, vet, the race tests;
# the infra checks): their output is kept in a log per lane and printed once
# the Go tests end, so nothing interleaves. Four lanes in make test (gofmt
# and vet; the race tests; the CDK tests; the synthesis and the Lambda
# emulator's tests), so that none waits for another once the Go tests are
# done.
# A lane started with --niced runs niced: one that is CPU-bound and has no
# clock to keep, while the Go tests' real-time suites (agents heartbeating,
# a browser's refresh) do more work the longer a busy machine makes them
# run. The race tests keep real deadlines (a create's 10 s): their lane is
# not niced, or a second run beside this one starves them past those.
# A failure anywhere never stops the rest; the run ends with one summary of
# what failed, and fails if anything did.
#
#   test/checks/checks.sh LOGDIR FOREGROUND-TARGET [--|--niced LANE-TARGETS...]...
#
# MAKE is the make to run (the Makefile passes its own).
set -uo pipefail
logs=$1 fg=$2
shift 2
make=${MAKE:-make}
mkdir -p "$logs"
rm -f "$logs"/*.log "$logs"/*.rc
start=$SECONDS

# The lanes: each -- starts one; --niced starts one that runs niced.
lanes=() niced=()
while [ $# -gt 0 ]; do
	nice=0
	case $1 in
	--) shift ;;
	--niced) nice=10 && shift ;;
	esac
	targets=()
	while [ $# -gt 0 ] && [ "$1" != -- ] && [ "$1" != --niced ]; do
		targets+=("$1")
		shift
	done
	[ ${#targets[@]} -gt 0 ] && lanes+=("${targets[*]}") && niced+=("$nice")
done

lane() {
	local n=$1 t0=$SECONDS rc=0
	shift
	# shellcheck disable=SC2086 # the lane's targets, one word each
	nice -n "${niced[$n]}" $make -k $* >"$logs/lane$n.log" 2>&1 || rc=$?
	echo "$rc $((SECONDS - t0))" >"$logs/lane$n.rc"
}
pids=()
for i in "${!lanes[@]}"; do
	lane "$i" "${lanes[$i]}" &
	pids+=($!)
done

t0=$SECONDS
$make "$fg" 2>&1 | tee "$logs/$fg.log"
fgrc=${PIPESTATUS[0]}
fgtook=$((SECONDS - t0))

status() { if [ "$1" = 0 ]; then echo ok; else echo FAIL; fi; }
summary=()
failed=0
[ "$fgrc" = 0 ] || failed=1
for i in "${!lanes[@]}"; do
	wait "${pids[$i]}"
	read -r rc took <"$logs/lane$i.rc"
	echo "== ${lanes[$i]} (beside the Go tests, ${took}s):"
	cat "$logs/lane$i.log"
	summary+=("$(printf '  %-4s %-12s %4ss' "$(status "$rc")" "${lanes[$i]}" "$took")")
	if [ "$rc" != 0 ]; then
		failed=1
		summary+=("$(grep -hoE '\*\*\* \[[^]]+\] Error [0-9]+' "$logs/lane$i.log" | sed 's/^/    /')")
	fi
done

echo
echo "== make test: $((SECONDS - start))s"
printf '  %-4s %-12s %4ss\n' "$(status "$fgrc")" "$fg" "$fgtook"
if [ "$fgrc" != 0 ]; then
	# Plain and -json output alike: the failed tests and packages.
	grep -hoE '^(--- FAIL: \S+|FAIL\s+\S+)' "$logs/$fg.log" | sed 's/^/    /' | sort -u
	grep -hoE '"Action":"fail","Package":"[^"]+"(,"Test":"[^"]+")?' "$logs/$fg.log" |
		sed -E 's/"Action":"fail","Package":"([^"]+)"(,"Test":"([^"]+)")?/    FAIL \3 \1/' | sort -u
fi
for line in "${summary[@]}"; do
	[ -n "$line" ] && echo "$line"
done
[ "$failed" = 0 ]
