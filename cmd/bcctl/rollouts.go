package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// rolloutsCreateCommand is `bcctl rollouts create VERSION --pool P --wave W…`:
// rollouts.create with the pools and waves as repeatable flags (a wave is a
// cumulative node count, 5, or percent, 10%), durations as durations (30s,
// 10m), drain's members as flags of their own and --no-rollback; every
// value is checked against the catalog's limits before anything is sent.
func (c *cli) rolloutsCreateCommand(m *api.Method) *cobra.Command {
	var fields []field
	for _, f := range fieldsOf(m) {
		if f.Name == "drain" {
			continue // its members are flags of their own
		}
		switch f.Name {
		case "waves":
			f.Type = "a cumulative node count (5) or percent (10%), repeatable"
		case "drain.onTimeout":
			f.Type = strings.Join(enumValues(f.Enum), " or ")
		}
		fields = append(fields, f)
	}
	byName := map[string]field{}
	for _, f := range fields {
		byName[f.Name] = f
	}
	values := map[string]*string{}
	var pools, waves []string
	var noRollback bool
	cmd := &cobra.Command{
		Use:   "create VERSION --pool POOL [--pool POOL]... --wave N|P% [--wave N|P%]...",
		Short: m.Brief(),
		Long: methodHelp(m, fields) + `

Waves are cumulative and in order: --wave 1 --wave 10% --wave 100% runs one node, then up to a tenth
of the rollout's nodes, then all of them; the last wave must cover every node (100%). A wave is a
node count (5) or a percent of the rollout's nodes (10%). Durations are Go durations in whole
seconds (30s, 10m, 1h30m). --no-rollback leaves the updated nodes on VERSION if it aborts.
bcctl rollouts watch ID follows it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"tenantId": c.tenantOf(cmd, m), "version": args[0]}
			if body["tenantId"] == "" {
				return usageErr(fmt.Errorf("%s: --tenant (or BC_TENANT) is required", m.Name))
			}
			if len(pools) == 0 {
				return usageErr(fmt.Errorf("%s: --pool is required (repeat it for more pools)", m.Name))
			}
			if len(waves) == 0 {
				return usageErr(fmt.Errorf("%s: --wave is required (e.g. --wave 1 --wave 10%% --wave 100%%)", m.Name))
			}
			specs, err := parseWaves(waves)
			if err != nil {
				return usageErr(fmt.Errorf("%s: %w", m.Name, err))
			}
			body["pools"], body["waves"] = pools, specs
			for _, name := range []string{"bakeSeconds", "maxUnavailable", "maxFailedNodes", "progressDeadlineSeconds",
				"drain.waitSeconds", "drain.onTimeout", "clientToken"} {
				f := byName[name]
				if !cmd.Flags().Changed(f.flag) {
					continue
				}
				raw := *values[f.flag]
				v, err := c.parseValue(f, raw, nil)
				if err != nil {
					return err
				}
				if n, ok := v.(int); ok {
					if err := checkBounds(f, n, raw); err != nil {
						return err
					}
				}
				if f.Enum != "" && !contains(enumValues(f.Enum), raw) {
					return usageErr(fmt.Errorf("--%s: %q is not one of %s", f.flag, raw, strings.Join(enumValues(f.Enum), ", ")))
				}
				setPath(body, f.Name, v)
			}
			if noRollback {
				body["rollbackOnAbort"] = false
			}
			return c.invoke(cmd, m, body, false)
		},
	}
	for _, f := range fields {
		switch {
		case f.flag == "":
		case f.Name == "pools":
			cmd.Flags().Var(&listFlag{&pools, "POOL"}, f.flag, f.usage())
		case f.Name == "waves":
			cmd.Flags().Var(&listFlag{&waves, "N|P%"}, f.flag, "a cumulative node count (5) or percent of the rollout's nodes (10%), repeatable, in order; "+
				"the last covers every node (100%); at most "+strconv.Itoa(rollout.MaxWaves)+"; required")
		case f.negated:
			cmd.Flags().BoolVar(&noRollback, f.flag, false, "on abort, leave the nodes it updated on the version (sends rollbackOnAbort false; by default they are rolled back)")
		default:
			values[f.flag] = new(string)
			cmd.Flags().Var(&typedFlag{values[f.flag], f.kind()}, f.flag, f.usage())
			if f.Enum != "" {
				_ = cmd.RegisterFlagCompletionFunc(f.flag, fixed(enumValues(f.Enum)...))
			}
		}
	}
	return cmd
}

// listFlag is a repeatable flag whose help names what it takes (--pool
// POOL, --wave N|P%).
type listFlag struct {
	v   *[]string
	typ string
}

func (f *listFlag) String() string     { return strings.Join(*f.v, ",") }
func (f *listFlag) Set(s string) error { *f.v = append(*f.v, s); return nil }
func (f *listFlag) Type() string       { return f.typ }

// parseWaves reads --wave values in order: "5" is a cumulative node
// count ({"nodes": 5}), "10%" a cumulative percent ({"percent": 10}). It
// refuses what the API would (a count below 1, a percent outside 1..100,
// more than rollout.MaxWaves waves, a wave smaller than the one before it
// of the same kind, a last percent wave below 100%), saying which wave.
func parseWaves(raw []string) ([]rollout.WaveSpec, error) {
	if len(raw) > rollout.MaxWaves {
		return nil, fmt.Errorf("--wave: %d waves, at most %d", len(raw), rollout.MaxWaves)
	}
	out := make([]rollout.WaveSpec, 0, len(raw))
	lastNodes, lastNodesWave, lastPercent := 0, 0, 0
	for i, s := range raw {
		w, err := parseWave(s)
		if err != nil {
			return nil, fmt.Errorf("--wave %s (wave %d): %w", s, i+1, err)
		}
		switch {
		case w.Nodes != nil && *w.Nodes < lastNodes:
			return nil, fmt.Errorf("--wave %s (wave %d): covers fewer nodes than wave %d (%d); waves are cumulative", s, i+1, lastNodesWave, lastNodes)
		case w.Percent != nil && *w.Percent < lastPercent:
			return nil, fmt.Errorf("--wave %s (wave %d): a smaller percent than an earlier wave (%d%%); waves are cumulative", s, i+1, lastPercent)
		case w.Nodes != nil:
			lastNodes, lastNodesWave = *w.Nodes, i+1
		default:
			lastPercent = *w.Percent
		}
		out = append(out, w)
	}
	if last := out[len(out)-1]; last.Percent != nil && *last.Percent != 100 {
		return nil, fmt.Errorf("--wave %s: the last wave must cover every node: end with --wave 100%%", raw[len(raw)-1])
	}
	return out, nil
}

var wavePattern = regexp.MustCompile(`^([0-9]+)(%?)$`)

// parseWave reads one --wave: "5" (nodes) or "10%" (percent).
func parseWave(s string) (rollout.WaveSpec, error) {
	m := wavePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return rollout.WaveSpec{}, errors.New("not a node count (5) or a percent (10%)")
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		return rollout.WaveSpec{}, errors.New("not a node count (5) or a percent (10%)")
	}
	if m[2] == "%" {
		if n < 1 || n > 100 {
			return rollout.WaveSpec{}, errors.New("a percent must be 1% to 100%")
		}
		return rollout.WaveSpec{Percent: &n}, nil
	}
	if n < 1 || n > 1_000_000 {
		return rollout.WaveSpec{}, errors.New("a node count must be 1 to 1000000")
	}
	return rollout.WaveSpec{Nodes: &n}, nil
}

var boundsPattern = regexp.MustCompile(`(?:^|; )(?:(-?\d+)\.\.(-?\d+)|at least (-?\d+)|at most (-?\d+))(?:;|$)`)

// checkBounds refuses an integer (or a duration's seconds) outside the
// field's catalog limits ("0..86400", "at least 1"), before it is sent.
func checkBounds(f field, n int, raw string) error {
	m := boundsPattern.FindStringSubmatch(f.Constraints)
	if m == nil {
		return nil
	}
	atoi := func(s string) (int, bool) { v, err := strconv.Atoi(s); return v, err == nil }
	lo, hasLo := atoi(m[1] + m[3])
	hi, hasHi := atoi(m[2] + m[4])
	if m[1] != "" {
		hasLo, hasHi = true, true
	}
	if (!hasLo || n >= lo) && (!hasHi || n <= hi) {
		return nil
	}
	unit, show := "", func(v int) string { return strconv.Itoa(v) }
	if f.kind() == "duration" {
		if raw != strconv.Itoa(n)+"s" {
			unit = " (" + strconv.Itoa(n) + "s)"
		}
		show = func(v int) string { return span(time.Duration(v) * time.Second) }
	}
	var want string
	switch {
	case hasLo && hasHi:
		want = show(lo) + " to " + show(hi)
	case hasLo:
		want = "at least " + show(lo)
	default:
		want = "at most " + show(hi)
	}
	return usageErr(fmt.Errorf("--%s: %s%s is out of range: %s", f.flag, raw, unit, want))
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// span is a duration as a person reads it, to the second: "45s", "4m30s",
// "1h", "1h5m", "2d3h" (seconds left out from an hour on, minutes from a
// day on).
func span(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	d = d.Round(time.Second)
	const day = 24 * time.Hour
	days, hours, mins, secs := int(d/day), int(d%day/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	var b strings.Builder
	part := func(n int, unit string) {
		if n > 0 {
			fmt.Fprintf(&b, "%d%s", n, unit)
		}
	}
	switch {
	case days > 0:
		part(days, "d")
		part(hours, "h")
	case hours > 0:
		part(hours, "h")
		part(mins, "m")
	default:
		part(mins, "m")
		part(secs, "s")
	}
	if b.Len() == 0 {
		return "0s"
	}
	return b.String()
}

// The rollout's printing: get, create, pause, resume and abort print a
// summary (printRollout), list a table, nodes a table, watch a picture.

// inProgress is how many of the rollout's nodes are out of service for it.
func inProgress(c rollout.Counts) int { return c.Draining + c.Installing + c.Verifying }

// countsText is the rollout's nodes by step in one line.
func countsText(c rollout.Counts) string {
	s := fmt.Sprintf("%s: %d updated, %d failed, %d skipped, %d in progress", strictjson.Plural(c.Nodes, "node"),
		c.Updated, c.Failed, c.Skipped, inProgress(c))
	var active []string
	for _, p := range []struct {
		n    int
		step rollout.Step
	}{{c.Draining, rollout.Draining}, {c.Installing, rollout.Installing}, {c.Verifying, rollout.Verifying}} {
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
func currentWave(r rollout.Rollout) int {
	for i, w := range r.Waves {
		if w.FinishedAt == nil {
			return i
		}
	}
	return len(r.Waves)
}

// waveNodes is how many nodes wave i takes (the sizes are cumulative).
func waveNodes(r rollout.Rollout, i int) int {
	if i == 0 {
		return r.Waves[0].Size
	}
	return r.Waves[i].Size - r.Waves[i-1].Size
}

// waveText says where the rollout is among its waves: "2 of 3: nodes 2-3
// of 6, started 3m ago".
func waveText(r rollout.Rollout, now time.Time) string {
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
func bakeLeft(r rollout.Rollout, now time.Time) (time.Duration, bool) {
	cur := currentWave(r)
	if r.State != rollout.Progressing || cur == 0 || cur == len(r.Waves) || r.Waves[cur].StartedAt != nil {
		return 0, false
	}
	left := r.Waves[cur-1].FinishedAt.Add(time.Duration(r.Settings.BakeSeconds) * time.Second).Sub(now)
	return left, left > 0
}

// abortReason says why a rollout aborted ("" when it did not): failures
// over the limit, or an operator's abort with the reason given.
func abortReason(r rollout.Rollout) string {
	if r.State != rollout.Aborting && r.State != rollout.Aborted && r.State != rollout.RolledBack {
		return ""
	}
	given := ""
	for _, e := range r.History {
		if e.State == rollout.Aborting {
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
func waitingFor(r rollout.Rollout, nodes []rollout.NodeProgress, now time.Time) string {
	active := inProgress(r.Counts)
	switch r.State {
	case rollout.Paused:
		s := "a resume: bcctl rollouts resume " + r.RolloutID
		if active > 0 {
			s += fmt.Sprintf(" (%s in progress finish meanwhile)", strictjson.Plural(active, "node"))
		}
		return s
	case rollout.Aborting:
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
				case n.Step == rollout.Updated && n.Rollback == "" && n.Reason != rollout.ReasonRunning:
					due++
				}
			}
			return fmt.Sprintf("the rollback: %d rolling back, %d to go, each to report the release it ran before running", rolling, due)
		}
		return "the rollback: each node it updated to report the release it ran before running"
	case rollout.Progressing:
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
		c, pending = rollout.Counts{}, 0
		for _, n := range nodes {
			if n.Wave > cur {
				continue
			}
			switch n.Step {
			case rollout.Draining:
				c.Draining++
			case rollout.Installing:
				c.Installing++
			case rollout.Verifying:
				c.Verifying++
			case rollout.Pending:
				pending++
			}
		}
	}
	var parts []string
	if c.Draining > 0 {
		then := "skipped"
		if r.Settings.Drain.OnTimeout == rollout.OnTimeoutForce {
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
func settingsText(s rollout.Settings) string {
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
func askedText(w rollout.WaveSpec) string {
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

// printRollout prints one rollout: where it is and what it waits for,
// its settings, its waves and its timeline.
func printRollout(w io.Writer, r rollout.Rollout, now time.Time) {
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
func printRollouts(w io.Writer, rs []rollout.Rollout, now time.Time) {
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
func stepText(n rollout.NodeProgress) string {
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
func printRolloutNodes(w io.Writer, ns []rollout.NodeProgress, now time.Time) {
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

// glyphs draw a node's step in the watch picture: Unicode, and ASCII
// (--ascii).
var glyphs = []struct {
	key            string
	unicode, ascii string
	meaning        string
}{
	{string(rollout.Pending), "·", ".", "pending"},
	{string(rollout.Draining), "~", "~", "draining"},
	{string(rollout.Installing), "↓", "v", "installing"},
	{string(rollout.Verifying), "?", "?", "verifying"},
	{string(rollout.Updated), "✓", "+", "updated"},
	{string(rollout.Failed), "✗", "x", "failed"},
	{string(rollout.Skipped), "–", "-", "skipped"},
	{"rollback:" + rollout.RollbackInstalling, "↺", "r", "rolling back"},
	{"rollback:" + rollout.RollbackDone, "↩", "<", "rolled back"},
	{"rollback:" + rollout.RollbackFailed, "!", "!", "rollback failed"},
}

// glyph is a node's cell: its rollback when it has one, else its step.
func glyph(n rollout.NodeProgress, ascii bool) string {
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
	Rollout rollout.Rollout
	Nodes   []rollout.NodeProgress
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
	case rollout.Completed:
		fmt.Fprintf(w, "completed: %s\n", completedText(r, p.Nodes, p.Partial))
	case rollout.RolledBack:
		fmt.Fprintln(w, "rolled back: every node it updated was sent back to the release it ran before")
	case rollout.Aborted:
		fmt.Fprintf(w, "aborted without rollback: the nodes it updated stay on %s\n", r.Version)
	}

	byWave := make([][]rollout.NodeProgress, len(r.Waves))
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

	var failed []rollout.NodeProgress
	var failedWave []int
	for i, n := range p.Nodes {
		if n.Step == rollout.Failed || n.Rollback == rollout.RollbackFailed {
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

// maxPage is the largest page a list answers (api.Page's limit).
const maxPage = 1000

// rolloutsWatchCommand is `bcctl rollouts watch ID`: the rollout drawn
// (one row per wave, one cell per node), redrawn as it moves, until it
// is terminal.
func (c *cli) rolloutsWatchCommand() *cobra.Command {
	var every time.Duration
	var maxNodes int
	var ascii bool
	cmd := &cobra.Command{
		Use:   "watch ROLLOUT",
		Short: "Draw a rollout's waves and nodes as they move, until it is terminal",
		Long: `Draws the rollout (rollouts.get and rollouts.nodes, every --interval): a header with its state,
wave, counts, the bake's countdown, what it waits for and why it aborted; one row per wave with
its node count and status, one cell per node (in the rollout's order, in groups of ten) showing
its step; the failed nodes with their reasons; a legend. On a terminal the picture is redrawn in
place; otherwise (a pipe, a file) a picture is printed each time something other than the clock
changed. -o json prints each change as one JSON line {"rollout", "nodes"}.

It exits when the rollout is terminal. Exit codes: 0 it completed and every node was updated;
1 it completed with nodes skipped or failed (how many, why, and the version's reach on stderr), it
was rolled back or aborted (the reason on stderr), or the API answered an error; 2 a bad command
line; 3 the API could not be reached.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case every <= 0:
				return usageErr(errors.New("rollouts watch: --interval must be positive"))
			case maxNodes < 1:
				return usageErr(errors.New("rollouts watch: --nodes must be at least 1"))
			}
			tenant := c.tenantOf(cmd, api.Lookup("rollouts.get"))
			tty := isTerminal(c.out)
			last := ""
			for {
				p, err := c.rolloutPicture(cmd, tenant, args[0], maxNodes)
				if err != nil {
					return err
				}
				p.ASCII = ascii
				now := c.now()
				var key strings.Builder
				if c.output == "json" {
					out, _ := json.Marshal(map[string]any{"rollout": p.Rollout, "nodes": p.Nodes})
					key.Write(out)
				} else {
					p.Draw(&key, now, false)
				}
				switch {
				case c.output == "json" && key.String() != last:
					fmt.Fprintln(c.out, key.String())
				case c.output == "json":
				case tty:
					fmt.Fprint(c.out, "\033[H\033[2J")
					p.Draw(c.out, now, true)
				case key.String() != last:
					if last != "" {
						fmt.Fprintln(c.out, "---")
					}
					p.Draw(c.out, now, true)
				}
				last = key.String()
				r := p.Rollout
				switch r.State {
				case rollout.Completed:
					// A completed rollout that left nodes behind is not a
					// success: a script waiting on it must not go on as if
					// every node ran the version.
					if short := shortfall(r, p.Nodes, p.Partial); short != "" {
						fmt.Fprintf(c.errOut, "bcctl: rollout %s completed, but %s\n", r.RolloutID, short)
						fmt.Fprintf(c.errOut, "    bcctl rollouts nodes %s --step %s lists them.\n", r.RolloutID, shortStep(r.Counts))
						return exitCode(exitAPIError)
					}
					return nil
				case rollout.RolledBack, rollout.Aborted:
					fmt.Fprintf(c.errOut, "bcctl: rollout %s %s: %s\n", r.RolloutID, strings.ReplaceAll(string(r.State), "_", " "), abortReason(r))
					return exitCode(exitAPIError)
				}
				if err := c.sleep(cmd.Context(), every); err != nil {
					return err
				}
			}
		},
	}
	cmd.Flags().DurationVar(&every, "interval", 2*time.Second, "how often to ask")
	cmd.Flags().IntVar(&maxNodes, "nodes", maxPage, "nodes to draw (the first, in the rollout's order; the counts cover all)")
	cmd.Flags().BoolVar(&ascii, "ascii", false, "draw with ASCII characters")
	return cmd
}

// rolloutPicture reads a rollout and its first max nodes.
func (c *cli) rolloutPicture(cmd *cobra.Command, tenant, id string, max int) (rolloutPicture, error) {
	ctx := cmd.Context()
	var got api.RolloutResult
	if err := c.callJSON(ctx, "rollouts.get", map[string]any{"tenantId": tenant, "rolloutId": id}, &got); err != nil {
		return rolloutPicture{}, err
	}
	p := rolloutPicture{Rollout: got.Rollout, Nodes: []rollout.NodeProgress{}}
	in := map[string]any{"tenantId": tenant, "rolloutId": id}
	for len(p.Nodes) < max {
		in["limit"] = min(max-len(p.Nodes), maxPage)
		var page api.RolloutNodesResult
		if err := c.callJSON(ctx, "rollouts.nodes", in, &page); err != nil {
			return rolloutPicture{}, err
		}
		p.Nodes = append(p.Nodes, page.Nodes...)
		if page.NextCursor == "" {
			return p, nil
		}
		in["cursor"] = page.NextCursor
	}
	p.Partial = len(p.Nodes) < p.Rollout.Counts.Nodes
	return p, nil
}

// isTerminal reports whether w is a terminal (watch redraws in place).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// rolloutVerbs are the verbs that change a rollout's state: the state each
// moves a rollout to, from which states.
var rolloutVerbs = map[string]struct {
	to   rollout.State
	from []rollout.State
}{
	"rollouts.pause":  {rollout.Paused, []rollout.State{rollout.Progressing}},
	"rollouts.resume": {rollout.Progressing, []rollout.State{rollout.Paused}},
	"rollouts.abort":  {rollout.Aborting, []rollout.State{rollout.Progressing, rollout.Paused}},
}

// rolloutBefore is the state of the rollout a pause, resume or abort is
// about to change ("" when it is no such verb, or the read failed: the
// verb's own call reports why). The API answers a rollout it did not
// change as it is, with no error, so only the state before tells a second
// abort from the first.
func (c *cli) rolloutBefore(cmd *cobra.Command, m *api.Method, body map[string]any) rollout.State {
	if _, ok := rolloutVerbs[m.Name]; !ok {
		return ""
	}
	var got api.RolloutResult
	if c.callJSON(cmd.Context(), "rollouts.get", map[string]any{"tenantId": body["tenantId"], "rolloutId": body["rolloutId"]}, &got) != nil {
		return ""
	}
	return got.Rollout.State
}

// unchangedNote says plainly on stderr when a pause, resume or abort
// changed nothing: the rollout was already in that state, or finished, or
// in a state the verb does not leave. The exit code stays 0: the API
// answers such a call with the rollout unchanged, no error (docs/rollouts.md).
func (c *cli) unchangedNote(method string, before rollout.State, answer []byte, reason string) {
	verb, ok := rolloutVerbs[method]
	var a api.RolloutResult
	if !ok || json.Unmarshal(answer, &a) != nil {
		return
	}
	r := a.Rollout
	if r.State == verb.to && (before == "" || slices.Contains(verb.from, before)) {
		return // this call changed it
	}
	name := strings.TrimPrefix(method, "rollouts.")
	var note string
	switch {
	case r.State.Terminal():
		note = fmt.Sprintf("rollout %s was already %s, a finished rollout: the %s changed nothing", r.RolloutID, r.State, name)
	case r.State == verb.to:
		note = fmt.Sprintf("rollout %s was already %s: the %s changed nothing", r.RolloutID, r.State, name)
	default:
		from := make([]string, len(verb.from))
		for i, s := range verb.from {
			from[i] = string(s)
		}
		note = fmt.Sprintf("rollout %s is %s: the %s changed nothing (it changes a %s rollout only)", r.RolloutID, r.State, name, strings.Join(from, " or "))
	}
	if reason != "" {
		note += fmt.Sprintf("; its --reason %q was not recorded", reason)
	}
	fmt.Fprintf(c.errOut, "bcctl: %s\n", note)
}

// shortfall says, for a completed rollout, which nodes it did not update
// and where the version runs ("" when it updated every node): "2 of 2
// nodes skipped (no_binary): 1.1.0 runs on none of them". The reasons
// come from the nodes read (partial: only the first of them).
func shortfall(r rollout.Rollout, nodes []rollout.NodeProgress, partial bool) string {
	c := r.Counts
	if c.Updated >= c.Nodes {
		return ""
	}
	var parts []string
	add := func(n int, what string) {
		switch {
		case n == 0:
		case len(parts) == 0:
			parts = append(parts, fmt.Sprintf("%d of %s %s", n, strictjson.Plural(c.Nodes, "node"), what))
		default:
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(c.Skipped, "skipped"+reasonKinds(nodes, rollout.Skipped, partial))
	add(c.Failed, "failed"+reasonKinds(nodes, rollout.Failed, partial))
	if len(parts) == 0 { // counts of a pass that has not caught up
		add(c.Nodes-c.Updated, "not updated")
	}
	reach := fmt.Sprintf("%s runs on %d of them", r.Version, c.Updated)
	if c.Updated == 0 {
		reach = r.Version + " runs on none of them"
	}
	return strings.Join(parts, " and ") + ": " + reach
}

// shortStep is the step to list for a completed rollout's shortfall.
func shortStep(c rollout.Counts) rollout.Step {
	if c.Skipped == 0 && c.Failed > 0 {
		return rollout.Failed
	}
	return rollout.Skipped
}

// reasonKinds is " (no_binary)" or " (1 no_binary, 1 busy)": the reasons of
// the nodes read in step, each cut to its kind (install: … → install).
func reasonKinds(nodes []rollout.NodeProgress, step rollout.Step, partial bool) string {
	counts := map[string]int{}
	var order []string
	for _, n := range nodes {
		if n.Step != step {
			continue
		}
		kind, _, _ := strings.Cut(n.Reason, ":")
		kind = dash(kind)
		if counts[kind] == 0 {
			order = append(order, kind)
		}
		counts[kind]++
	}
	if len(order) == 0 {
		return ""
	}
	if len(order) == 1 && !partial {
		return " (" + order[0] + ")"
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[k], k)
	}
	s := strings.Join(parts, ", ")
	if partial {
		s += ", of the nodes drawn"
	}
	return " (" + s + ")"
}

// completedText is what a completed rollout's picture says of its reach:
// the version becomes the baseline only of pools where it updated a node.
func completedText(r rollout.Rollout, nodes []rollout.NodeProgress, partial bool) string {
	if r.Counts.Updated == 0 {
		return fmt.Sprintf("no node was updated: %s runs on none of them and is no pool's baseline", r.Version)
	}
	if partial {
		return fmt.Sprintf("%s is the baseline of each of %s where a node was updated", r.Version, strings.Join(r.Pools, ", "))
	}
	updated := map[string]bool{}
	for _, n := range nodes {
		if n.Step == rollout.Updated {
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
func waveOfPosition(r rollout.Rollout, i int) int {
	for w, wv := range r.Waves {
		if i < wv.Size {
			return w
		}
	}
	return len(r.Waves) - 1
}

// reasonWidth is the widest reason a table cell shows; reasonLine the
// widest line of a reason watch prints.
const (
	reasonWidth = 60
	reasonLine  = 100
)

// readableReason is a reason as the API keeps it (200 characters; a longer
// one ends in "…"), with a clipped tail cut back to a word boundary, so no
// hash or URL is shown half.
func readableReason(s string) string {
	if !strings.HasSuffix(s, "…") {
		return s
	}
	body := strings.TrimSuffix(s, "…")
	if i := strings.LastIndexByte(body, ' '); i > 0 {
		body = body[:i]
	}
	return strings.TrimRight(body, " ,:;") + " …"
}

// cutReason fits a reason in a table cell, cut at a word boundary; cut
// says whether it was.
func cutReason(s string) (out string, cut bool) {
	s = readableReason(s)
	r := []rune(s)
	if len(r) <= reasonWidth {
		return s, false
	}
	head := string(r[:reasonWidth-1])
	if i := strings.LastIndexByte(head, ' '); i > reasonWidth/3 {
		head = head[:i]
	} else if i := strings.LastIndexByte(head, '/'); i > reasonWidth/3 {
		head = head[:i+1] // within a long URL, after a path segment
	}
	return strings.TrimRight(head, " ,:;") + "…", true
}

// wrapWords breaks s into lines of at most width runes at spaces (a word
// longer than width stands on a line of its own).
func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len([]rune(line))+1+len([]rune(w)) <= width:
			line += " " + w
		default:
			lines, line = append(lines, line), w
		}
	}
	return append(lines, line)
}
