package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
)

// glyphs draw a node's step in the watch picture: Unicode, and ASCII
// (--ascii).
var glyphs = []struct {
	key            string
	unicode, ascii string
	meaning        string
}{
	{string(api.Pending), "·", ".", "pending"},
	{string(api.Draining), "~", "~", "draining"},
	{string(api.Installing), "↓", "v", "installing"},
	{string(api.Verifying), "?", "?", "verifying"},
	{string(api.Updated), "✓", "+", "updated"},
	{string(api.Failed), "✗", "x", "failed"},
	{string(api.Skipped), "–", "-", "skipped"},
	{"rollback:" + rollout.RollbackInstalling, "↺", "r", "rolling back"},
	{"rollback:" + rollout.RollbackDone, "↩", "<", "rolled back"},
	{"rollback:" + rollout.RollbackFailed, "!", "!", "rollback failed"},
}

// glyph is a node's cell: its rollback when it has one, else its step.
func glyph(n api.NodeProgress, ascii bool) string {
	key := string(n.Step)
	if n.Rollback != "" {
		key = "rollback:" + n.Rollback
	}
	for _, g := range glyphs {
		if g.key == key {
			if ascii {
				return g.ascii
			}
			return g.unicode
		}
	}
	return "?"
}

// legend lists every glyph and its meaning on one line.
func legend(ascii bool) string {
	parts := make([]string, len(glyphs))
	for i, g := range glyphs {
		c := g.unicode
		if ascii {
			c = g.ascii
		}
		parts[i] = c + " " + g.meaning
	}
	return strings.Join(parts, "  ")
}

// rolloutPicture is what watch draws: a rollout (rollouts.get) and the
// first of its nodes (rollouts.nodes, in its order).
type rolloutPicture struct {
	Rollout api.Rollout
	Nodes   []api.NodeProgress
	// Partial: more nodes than Nodes exist (watch reads at most --nodes).
	Partial bool
	ASCII   bool
}

// cellsPerLine and cellsPerGroup lay a wave's cells out: groups of ten, so
// they can be counted, five groups a line.
const (
	cellsPerGroup = 10
	cellsPerLine  = 50
	failedShown   = 5
)

// Draw writes the picture as of now. Without timers the parts that change
// with the clock alone (the bake's countdown, ages) are left out: watch
// compares such drawings to tell whether anything happened.
func (p rolloutPicture) Draw(w io.Writer, now time.Time, timers bool) {
	r := p.Rollout
	fmt.Fprintf(w, "rollout %s · %s (sequence %d) · %s\n", r.RolloutID, r.Version, r.Sequence, strings.Join(r.Pools, ", "))
	wave := fmt.Sprintf("wave %d of %d", min(currentWave(r)+1, len(r.Waves)), len(r.Waves))
	fmt.Fprintf(w, "%s · %s · %s\n", r.State, wave, countsText(r.Counts))
	if a := abortReason(r); a != "" {
		fmt.Fprintf(w, "abort reason: %s\n", a)
	}
	if left, ok := bakeLeft(r, now); ok && timers {
		fmt.Fprintf(w, "waiting for: the bake, %s left, then wave %d\n", span(left), currentWave(r)+1)
	} else if ok {
		fmt.Fprintf(w, "waiting for: the bake, then wave %d\n", currentWave(r)+1)
	} else if s := waitingFor(r, p.Nodes, now); s != "" {
		fmt.Fprintf(w, "waiting for: %s\n", s)
	}
	switch r.State {
	case api.Completed:
		fmt.Fprintf(w, "completed: %s\n", completedText(r, p.Nodes, p.Partial))
	case api.RolledBack:
		fmt.Fprintln(w, "rolled back: every node it updated was sent back to the release it ran before")
	case api.Aborted:
		fmt.Fprintf(w, "aborted without rollback: the nodes it updated stay on %s\n", r.Version)
	}

	byWave := make([][]api.NodeProgress, len(r.Waves))
	for i, n := range p.Nodes {
		if w := waveOfPosition(r, i); w >= 0 {
			byWave[w] = append(byWave[w], n)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tSIZE\tSTATUS\tNODES")
	cur := currentWave(r)
	for i, wv := range r.Waves {
		status := "pending"
		switch {
		case wv.FinishedAt != nil:
			status = "done"
		case wv.StartedAt != nil && r.State.Terminal():
			status = "stopped"
		case wv.StartedAt != nil:
			status = "running"
		case r.State.Terminal():
			status = "not started"
		case i == cur:
			status = "next"
			if left, ok := bakeLeft(r, now); ok && timers {
				status = "bake " + span(left)
			} else if ok {
				status = "baking"
			}
		}
		var cells strings.Builder
		var lines []string
		for k, n := range byWave[i] {
			if k > 0 && k%cellsPerLine == 0 {
				lines, cells = append(lines, cells.String()), strings.Builder{}
			} else if k > 0 && k%cellsPerGroup == 0 {
				cells.WriteByte(' ')
			}
			cells.WriteString(glyph(n, p.ASCII))
		}
		if missing := waveNodes(r, i) - len(byWave[i]); missing > 0 && p.Partial {
			if cells.Len() > 0 {
				cells.WriteByte(' ')
			}
			fmt.Fprintf(&cells, "(+%d not drawn)", missing)
		}
		lines = append(lines, cells.String())
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\n", i+1, waveNodes(r, i), status, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(tw, "\t\t\t%s\n", l)
		}
	}
	tw.Flush()

	var failed []api.NodeProgress
	var failedWave []int
	for i, n := range p.Nodes {
		if n.Step == api.Failed || n.Rollback == rollout.RollbackFailed {
			failed, failedWave = append(failed, n), append(failedWave, waveOfPosition(r, i))
		}
	}
	if len(failed) > 0 {
		fmt.Fprintln(w)
		for i, n := range failed {
			if i == failedShown {
				fmt.Fprintf(w, "… and %d more failed (bcctl rollouts nodes %s --step failed)\n", len(failed)-failedShown, r.RolloutID)
				break
			}
			what := "failed"
			if n.Rollback == rollout.RollbackFailed {
				what = "rollback failed"
			}
			head := fmt.Sprintf("%s: %s (%s, wave %d):", what, n.NodeID, n.PoolID, failedWave[i]+1)
			reason := dash(readableReason(n.Reason))
			if len([]rune(head))+1+len([]rune(reason)) <= reasonLine {
				fmt.Fprintln(w, head+" "+reason)
				continue
			}
			// A long reason (a URL, two digests) on lines of its own,
			// broken at words, so a hash is never split.
			fmt.Fprintln(w, head)
			for _, l := range wrapWords(reason, reasonLine-4) {
				fmt.Fprintln(w, "    "+l)
			}
		}
	}
	if p.Partial {
		fmt.Fprintf(w, "\ncells: the first %d of %d nodes (--nodes draws more); the counts cover every node\n", len(p.Nodes), r.Counts.Nodes)
	}
	fmt.Fprintf(w, "\n%s\n", legend(p.ASCII))
}

// completedText is what a completed rollout's picture says of its reach:
// the version becomes the baseline only of pools where it updated a node.
func completedText(r api.Rollout, nodes []api.NodeProgress, partial bool) string {
	if r.Counts.Updated == 0 {
		return fmt.Sprintf("no node was updated: %s runs on none of them and is no pool's baseline", r.Version)
	}
	if partial {
		return fmt.Sprintf("%s is the baseline of each of %s where a node was updated", r.Version, strings.Join(r.Pools, ", "))
	}
	updated := map[string]bool{}
	for _, n := range nodes {
		if n.Step == api.Updated {
			updated[n.PoolID] = true
		}
	}
	var in, out []string
	for _, pool := range r.Pools {
		if updated[pool] {
			in = append(in, pool)
		} else {
			out = append(out, pool)
		}
	}
	s := fmt.Sprintf("%s is the baseline of %s", r.Version, strings.Join(in, ", "))
	if len(out) > 0 {
		s += fmt.Sprintf(" (not of %s: no node updated there)", strings.Join(out, ", "))
	}
	return s
}

// waveOfPosition is the wave of the i-th node of the rollout's order: the
// waves are cumulative prefixes of it (the last takes any beyond). Watch
// draws by position, not by each node's wave field, because the API
// answers wave 0 for every node until the reconciler has walked the order
// to find the waves' bounds.
func waveOfPosition(r api.Rollout, i int) int {
	for w, wv := range r.Waves {
		if i < wv.Size {
			return w
		}
	}
	return len(r.Waves) - 1
}
