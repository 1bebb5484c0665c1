#!/usr/bin/env bash
# The fleet protocol simulation's revert table (docs/fleet.md): each fix
# reverted alone (one patch here, applied in a scratch worktree of HEAD),
# the seeds run, the checks that failed printed. make fleetproto-reverts
# runs it; REVERTS=F03 limits it to patches whose name starts so; REVERTS=L
# runs the release log simulation's and REVERTS=R the registration
# simulation's (docs/releases.md).
#   usage: run.sh SEEDS    e.g. run.sh 1,2,3,4,5,6,7,8
set -uo pipefail
seeds=${1:-1,2,3,4,5,6,7,8}
root=$(git rev-parse --show-toplevel)
dir="$root/test/fleetproto/reverts"
wt=$(mktemp -d "${TMPDIR:-/tmp}/bc-reverts.XXXXXX")
# The links go first: a forced worktree removal would follow them and empty
# the repository's own node_modules and .tools.
trap 'rm -f "$wt/node_modules" "$wt/.tools"; git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1; rm -rf "$wt"' EXIT
git -C "$root" worktree add -q --detach "$wt" HEAD
ln -s "$root/node_modules" "$wt/node_modules"
ln -s "$root/.tools" "$wt/.tools"
cd "$wt"
run() { # the seeds on the tree as it is now: F patches the fleet protocol's, L the release log's
	local out rc
	case "${1:-F}" in
	L) out=$(BC_LOGSIM_SEED=$seeds go test ./test/fleetproto -run TestReleaseLogSimulation -count=1 -timeout 0 -v 2>&1) ;;
	R) out=$(BC_REGSIM_SEED=$seeds go test ./test/fleetproto -run TestRegisterSimulation -count=1 -timeout 0 -v 2>&1) ;;
	*) out=$(BC_FLEETPROTO_SEED=$seeds go test ./test/fleetproto -run TestFleetProtocolSimulation -count=1 -timeout 0 -v 2>&1) ;;
	esac
	rc=$?
	printf '%s\n' "$out" | grep -E 'checks failed|: check [a-z-]+: |releaselog_test.go:[0-9]+: [a-g]: |register_sim_test.go:[0-9]+: r[1-4]: |--- FAIL: Test(ReleaseLog|RegisterSim)' | grep -v 'steps up to' | sed 's/^ *\(sim\|releaselog\|register_sim\)_test.go:[0-9]*: /  /' | sort -u | cut -c1-220
	if [ $rc -eq 0 ]; then echo "  every seed passes"; fi
}
echo "== HEAD $(git rev-parse --short HEAD), seeds $seeds"
run "${REVERTS:-F}"
for p in "$dir"/${REVERTS:-F}*.patch; do
	name=$(basename "$p" .patch)
	echo "== $name"
	if ! git apply "$p"; then
		echo "  the patch no longer applies: the fix moved; regenerate it (git diff of the revert)"
		continue
	fi
	run "${name:0:1}"
	git checkout -q -- .
done
