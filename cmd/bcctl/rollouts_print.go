package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// rolloutTable, rolloutsTable and rolloutNodesTable print rollouts.create,
// get, pause, resume and abort (one rollout), list, and nodes.
var (
	rolloutTable      = oneTable(func(w io.Writer, a api.RolloutResult, now time.Time) { printRollout(w, a.Rollout, now) })
	rolloutsTable     = listTable(func(a api.ListRolloutsResult) []api.Rollout { return a.Rollouts }, printRollouts)
	rolloutNodesTable = listTable(func(a api.RolloutNodesResult) []api.NodeProgress { return a.Nodes }, printRolloutNodes)
)

// printRollout prints one rollout: where it is and what it waits for,
// its settings, its waves and its timeline.
func printRollout(w io.Writer, r api.Rollout, now time.Time) {
	fmt.Fprintf(w, "rollout\t%s\nversion\t%s (sequence %d)\npools\t%s\nstate\t%s\n", r.RolloutID, r.Version, r.Sequence,
		strings.Join(r.Pools, ", "), r.State)
	if a := abortReason(r); a != "" {
		fmt.Fprintf(w, "abort reason\t%s\n", a)
	}
	fmt.Fprintf(w, "wave\t%s\nnodes\t%s\n", waveText(r, now), countsText(r.Counts))
	if left, ok := bakeLeft(r, now); ok {
		fmt.Fprintf(w, "bake\t%s left, then wave %d\n", span(left), currentWave(r)+1)
	}
	if s := waitingFor(r, nil, now); s != "" {
		fmt.Fprintf(w, "waiting for\t%s\n", s)
	}
	if r.State.Terminal() && len(r.History) > 0 {
		fmt.Fprintf(w, "ended\t%s\n", stamp(r.History[len(r.History)-1].At))
	}
	fmt.Fprintf(w, "settings\t%s\ncreated\t%s by %s/%s\n", settingsText(r.Settings), stamp(r.CreatedAt), r.CreatedBy.TenantID, r.CreatedBy.Principal)
	fmt.Fprintln(w, "\nWAVE\tASKED\tNODES\tUP TO\tSTARTED\tFINISHED")
	for i, wv := range r.Waves {
		asked := "-"
		if i < len(r.Settings.Waves) {
			asked = askedText(r.Settings.Waves[i])
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%s\n", i+1, asked, waveNodes(r, i), wv.Size, stampOf(wv.StartedAt), stampOf(wv.FinishedAt))
	}
	fmt.Fprintln(w, "\nSTATE\tAT\tREASON")
	for _, e := range r.History {
		fmt.Fprintf(w, "%s\t%s\t%s\n", e.State, stamp(e.At), dash(e.Reason))
	}
}

// printRollouts lists rollouts, one row each.
func printRollouts(w io.Writer, rs []api.Rollout, now time.Time) {
	fmt.Fprintln(w, "ROLLOUT\tVERSION\tPOOLS\tSTATE\tWAVE\tUPDATED\tFAILED\tAGE")
	for _, r := range rs {
		state := string(r.State)
		switch r.Reason {
		case "":
		case rollout.ReasonAbortedBy:
			state += " (by an operator)"
		default:
			state += " (" + r.Reason + ")"
		}
		wave := fmt.Sprintf("%d/%d", min(currentWave(r)+1, len(r.Waves)), len(r.Waves))
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\n", r.RolloutID, r.Version, shorten(strings.Join(r.Pools, ","), 40), state, wave,
			r.Counts.Updated, r.Counts.Nodes, r.Counts.Failed, minutes(now.Sub(r.CreatedAt)))
	}
}

// stepText is a node's step with its rollback: "updated, rolling back".
func stepText(n api.NodeProgress) string {
	switch n.Rollback {
	case rollout.RollbackInstalling:
		return string(n.Step) + ", rolling back"
	case rollout.RollbackDone:
		return string(n.Step) + ", rolled back"
	case rollout.RollbackFailed:
		return string(n.Step) + ", rollback failed"
	}
	return string(n.Step)
}

// printRolloutNodes lists a rollout's nodes in its order, one row each
// (waves counted from 1, as everywhere bcctl prints them).
func printRolloutNodes(w io.Writer, ns []api.NodeProgress, now time.Time) {
	fmt.Fprintln(w, "NODE\tPOOL\tWAVE\tSTEP\tREASON\tSINCE")
	for _, n := range ns {
		at := n.UpdatedAt
		reason, _ := cutReason(n.Reason)
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", n.NodeID, n.PoolID, n.Wave+1, stepText(n), dash(reason), ago(&at, now))
	}
}

// cutNote says on stderr, after a rollouts.nodes table, that reasons were
// cut to fit it and where they are whole.
func (c *cli) cutNote(method string, pages [][]byte) {
	if method != "rollouts.nodes" || c.output != "table" {
		return
	}
	as, err := decodePages[api.RolloutNodesResult](method, pages)
	if err != nil {
		return
	}
	for _, a := range as {
		for _, n := range a.Nodes {
			if _, cut := cutReason(n.Reason); cut {
				fmt.Fprintf(c.errOut, "bcctl: reasons longer than %d characters are cut at a word; -o json prints them as the API keeps them\n", reasonWidth)
				return
			}
		}
	}
}
