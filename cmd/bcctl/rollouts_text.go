package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// The rollout's printing: get, create, pause, resume and abort print a
// summary (printRollout), list a table, nodes a table (rollouts_print.go),
// watch a picture (rollouts_picture.go). Here: the sentences they share.

// inProgress is how many of the rollout's nodes are out of service for it.
func inProgress(c api.Counts) int { return c.Draining + c.Installing + c.Verifying }

// countsText is the rollout's nodes by step in one line.
func countsText(c api.Counts) string {
	s := fmt.Sprintf("%s: %d updated, %d failed, %d skipped, %d in progress", strictjson.Plural(c.Nodes, "node"),
		c.Updated, c.Failed, c.Skipped, inProgress(c))
	var active []string
	for _, p := range []struct {
		n    int
		step api.RolloutStep
	}{{c.Draining, api.Draining}, {c.Installing, api.Installing}, {c.Verifying, api.Verifying}} {
		if p.n > 0 {
			active = append(active, fmt.Sprintf("%d %s", p.n, p.step))
		}
	}
	if len(active) > 0 {
		s += " (" + strings.Join(active, ", ") + ")"
	}
	return s + fmt.Sprintf(", %d pending", c.Pending)
}

// currentWave is the index of the rollout's first wave not finished, or
// len(waves) when every wave is.
func currentWave(r api.Rollout) int {
	for i, w := range r.Waves {
		if w.FinishedAt == nil {
			return i
		}
	}
	return len(r.Waves)
}

// waveNodes is how many nodes wave i takes (the sizes are cumulative).
func waveNodes(r api.Rollout, i int) int {
	if i == 0 {
		return r.Waves[0].Size
	}
	return r.Waves[i].Size - r.Waves[i-1].Size
}

// waveText says where the rollout is among its waves: "2 of 3: nodes 2-3
// of 6, started 3m ago".
func waveText(r api.Rollout, now time.Time) string {
	n := len(r.Waves)
	cur := currentWave(r)
	switch {
	case n == 0:
		return "-"
	case cur == n:
		return fmt.Sprintf("%d of %d, every wave done", n, n)
	}
	w := r.Waves[cur]
	s := fmt.Sprintf("%d of %d", cur+1, n)
	from := 1
	if cur > 0 {
		from = r.Waves[cur-1].Size + 1
	}
	switch {
	case w.Size < from:
		s += ": no nodes of its own"
	case w.Size == from:
		s += fmt.Sprintf(": node %d of %d", from, r.Counts.Nodes)
	default:
		s += fmt.Sprintf(": nodes %d-%d of %d", from, w.Size, r.Counts.Nodes)
	}
	if w.StartedAt != nil {
		return s + ", started " + ago(w.StartedAt, now)
	}
	return s + ", not started"
}

// bakeLeft is how long the bake before the current wave still runs (false
// when the rollout is not baking).
func bakeLeft(r api.Rollout, now time.Time) (time.Duration, bool) {
	cur := currentWave(r)
	if r.State != api.Progressing || cur == 0 || cur == len(r.Waves) || r.Waves[cur].StartedAt != nil {
		return 0, false
	}
	left := r.Waves[cur-1].FinishedAt.Add(time.Duration(r.Settings.BakeSeconds) * time.Second).Sub(now)
	return left, left > 0
}

// abortReason says why a rollout aborted ("" when it did not): failures
// over the limit, or an operator's abort with the reason given.
func abortReason(r api.Rollout) string {
	if r.State != api.Aborting && r.State != api.Aborted && r.State != api.RolledBack {
		return ""
	}
	given := ""
	for _, e := range r.History {
		if e.State == api.Aborting {
			given = e.Reason
		}
	}
	switch r.Reason {
	case rollout.ReasonFailures:
		return fmt.Sprintf("failures: %d failed, more than --max-failed %d allows", r.Counts.Failed, r.Settings.MaxFailedNodes)
	case rollout.ReasonAbortedBy:
		if given != "" && given != rollout.ReasonAbortedBy {
			return "aborted by an operator: " + given
		}
		return "aborted by an operator (rollouts abort)"
	}
	return dash(r.Reason)
}

// waitingFor says what the rollout waits for now ("" once it is terminal).
// nodes, when known (watch), are its nodes: then the current wave's are
// counted exactly; without them (get) the rollout's counts are used.
func waitingFor(r api.Rollout, nodes []api.NodeProgress, now time.Time) string {
	active := inProgress(r.Counts)
	switch r.State {
	case api.Paused:
		s := "a resume: bcctl rollouts resume " + r.RolloutID
		if active > 0 {
			s += fmt.Sprintf(" (%s in progress finish meanwhile)", strictjson.Plural(active, "node"))
		}
		return s
	case api.Aborting:
		if active > 0 {
			s := fmt.Sprintf("%s in progress to finish (those draining go back at once)", strictjson.Plural(active, "node"))
			if r.Settings.RollbackOnAbort {
				s += ", then the rollback of the nodes it updated"
			}
			return s
		}
		if !r.Settings.RollbackOnAbort {
			return "the next reconciler pass, to end it (no rollback)"
		}
		if nodes != nil {
			rolling, due := 0, 0
			for _, n := range nodes {
				switch {
				case n.Rollback == rollout.RollbackInstalling:
					rolling++
				case n.Step == api.Updated && n.Rollback == "" && n.Reason != rollout.ReasonRunning:
					due++
				}
			}
			return fmt.Sprintf("the rollback: %d rolling back, %d to go, each to report the release it ran before running", rolling, due)
		}
		return "the rollback: each node it updated to report the release it ran before running"
	case api.Progressing:
	default:
		return ""
	}
	cur := currentWave(r)
	switch {
	case cur == len(r.Waves):
		return "the next reconciler pass, to complete it"
	case r.Waves[cur].StartedAt == nil && cur == 0:
		return "the reconciler, to take its pools' nodes and start wave 1"
	case r.Waves[cur].StartedAt == nil:
		if left, ok := bakeLeft(r, now); ok {
			return fmt.Sprintf("the bake: wave %d starts in %s", cur+1, span(left))
		}
		return fmt.Sprintf("the next reconciler pass, to start wave %d", cur+1)
	}
	c := r.Counts
	pending := -1 // unknown
	if nodes != nil {
		c, pending = api.Counts{}, 0
		for _, n := range nodes {
			if n.Wave > cur {
				continue
			}
			switch n.Step {
			case api.Draining:
				c.Draining++
			case api.Installing:
				c.Installing++
			case api.Verifying:
				c.Verifying++
			case api.Pending:
				pending++
			}
		}
	}
	var parts []string
	if c.Draining > 0 {
		then := "skipped"
		if r.Settings.Drain.OnTimeout == api.OnTimeoutForce {
			then = "forced"
		}
		parts = append(parts, fmt.Sprintf("%d draining (cordoned: installs once no reservation holds its devices, %s after %s)", c.Draining, then,
			span(time.Duration(r.Settings.Drain.WaitSeconds)*time.Second)))
	}
	if c.Installing > 0 {
		parts = append(parts, fmt.Sprintf("%d installing", c.Installing))
	}
	if c.Verifying > 0 {
		parts = append(parts, fmt.Sprintf("%d verifying (a healthy report running %s)", c.Verifying, r.Version))
	}
	room := fmt.Sprintf("at most %d of its pools' nodes out of service at once", r.Settings.MaxUnavailable)
	switch {
	case pending > 0:
		parts = append(parts, fmt.Sprintf("%d pending (%s)", pending, room))
	case pending < 0 && len(parts) == 0:
		parts = append(parts, "its pending nodes to start ("+room+")")
	case len(parts) == 0:
		parts = append(parts, "the next reconciler pass, to finish it")
	}
	return fmt.Sprintf("wave %d: %s", cur+1, strings.Join(parts, ", "))
}

// settingsText is the create's options as applied, in flag terms.
func settingsText(s api.Settings) string {
	rollback := "rollback on abort"
	if !s.RollbackOnAbort {
		rollback = "no rollback"
	}
	return fmt.Sprintf("max-unavailable %d, max-failed %d, bake %s, progress-deadline %s, drain-wait %s then %s, %s",
		s.MaxUnavailable, s.MaxFailedNodes, span(time.Duration(s.BakeSeconds)*time.Second),
		span(time.Duration(s.ProgressDeadlineSeconds)*time.Second), span(time.Duration(s.Drain.WaitSeconds)*time.Second),
		s.Drain.OnTimeout, rollback)
}

// askedText is a wave as asked: "5" or "10%".
func askedText(w api.WaveSpec) string {
	switch {
	case w.Nodes != nil:
		return strconv.Itoa(*w.Nodes)
	case w.Percent != nil:
		return strconv.Itoa(*w.Percent) + "%"
	}
	return "-"
}

func stampOf(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}
