package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
)

type rolloutsData struct {
	page
	Rows    []rolloutRow
	State   string
	States  []api.RolloutState
	NextURL string
}

type rolloutRow struct {
	R     api.Rollout
	Waves []waveCell
	Done  int // nodes updated, failed or skipped
	Words string
}

type waveCell struct {
	N      int
	Status string // done, running, waiting
	Title  string
}

func (c *Console) rolloutsPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := rolloutsData{page: c.newPage(r, v), State: r.URL.Query().Get("state"), States: api.RolloutStates}
	in := map[string]any{"tenantId": v.Tenant, "limit": 100}
	if d.State != "" {
		in["state"] = d.State
	}
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		in["cursor"] = cur
	}
	var out api.ListRolloutsResult
	if err := c.cfg.Caller.Call(ctx, v, "rollouts.list", in, &out); err != nil {
		return view{}, err
	}
	tags := []string{d.State}
	moving := false
	for _, ro := range out.Rollouts {
		d.Rows = append(d.Rows, rolloutRowOf(ro))
		tags = append(tags, ro.RolloutID, ro.UpdatedAt.String(), string(ro.State))
		moving = moving || !ro.State.Terminal()
	}
	if out.NextCursor != "" {
		q := r.URL.Query()
		q.Set("cursor", out.NextCursor)
		d.NextURL = "/console/rollouts?" + q.Encode()
	}
	if moving {
		d.PollURL, d.PollEvery = r.URL.RequestURI(), int(c.cfg.Poll.Seconds())
	}
	tag := etag(tags...)
	if matches(r, tag) {
		return view{ETag: tag, NotModified: true}, nil
	}
	return view{Name: "rollouts", Data: d, ETag: tag}, nil
}

func rolloutRowOf(ro api.Rollout) rolloutRow {
	row := rolloutRow{R: ro, Done: ro.Counts.Updated + ro.Counts.Failed + ro.Counts.Skipped}
	current := 0
	for i, w := range ro.Waves {
		cell := waveCell{N: i + 1, Status: "waiting", Title: fmt.Sprintf("wave %d: up to %d nodes, waiting", i+1, w.Size)}
		switch {
		case w.FinishedAt != nil:
			cell.Status, cell.Title = "done", fmt.Sprintf("wave %d: up to %d nodes, done %s", i+1, w.Size, hm(*w.FinishedAt))
		case w.StartedAt != nil:
			cell.Status, cell.Title = "running", fmt.Sprintf("wave %d: up to %d nodes, started %s", i+1, w.Size, hm(*w.StartedAt))
			current = i + 1
		}
		row.Waves = append(row.Waves, cell)
	}
	parts := []string{fmt.Sprintf("%d/%d updated", ro.Counts.Updated, ro.Counts.Nodes)}
	if current > 0 {
		parts = append([]string{fmt.Sprintf("wave %d of %d", current, len(ro.Waves))}, parts...)
	}
	if ro.Counts.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", ro.Counts.Failed))
	}
	if ro.Counts.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", ro.Counts.Skipped))
	}
	if n := ro.Counts.Draining + ro.Counts.Installing + ro.Counts.Verifying; n > 0 {
		parts = append(parts, fmt.Sprintf("%d in progress", n))
	}
	row.Words = strings.Join(parts, " · ")
	return row
}

type rolloutData struct {
	page
	Row        rolloutRow
	Steps      []stepGroup
	InUse      int
	Allowed    int
	Failures   []api.NodeProgress
	Previous   string // the release updated nodes go back to on abort
	Confirm    map[string]string
	Terminal   bool
	NodesShown int
	MoreNodes  bool
}

type stepGroup struct {
	Step  api.RolloutStep
	Nodes []api.NodeProgress
}

// rolloutNodesShown bounds the nodes the page lists by outcome (its counts
// cover every node).
const rolloutNodesShown = 1000

func (c *Console) rolloutPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := rolloutData{page: c.newPage(r, v)}
	var out api.RolloutResult
	id := r.PathValue("id")
	if err := c.cfg.Caller.Call(ctx, v, "rollouts.get", map[string]any{"tenantId": v.Tenant, "rolloutId": id}, &out); err != nil {
		return view{}, err
	}
	ro := out.Rollout
	d.Terminal = ro.State.Terminal()
	if !d.Terminal {
		d.PollURL, d.PollEvery = r.URL.RequestURI(), int(c.cfg.Poll.Seconds())
	}
	// The rollout's item changes whenever its nodes' counts, waves or state
	// do: a refresh that finds it as the viewer has it reads nothing more.
	c2 := ro.Counts
	tag := etag(ro.RolloutID, string(ro.State), ro.UpdatedAt.String(), fmt.Sprint(c2.Pending, c2.Draining, c2.Installing, c2.Verifying, c2.Updated, c2.Failed, c2.Skipped), strconv.Itoa(len(ro.History)))
	if matches(r, tag) {
		return view{ETag: tag, NotModified: true}, nil
	}
	d.Row = rolloutRowOf(ro)
	var nodes api.RolloutNodesResult
	if err := c.cfg.Caller.Call(ctx, v, "rollouts.nodes", map[string]any{"tenantId": v.Tenant, "rolloutId": id, "limit": rolloutNodesShown}, &nodes); err != nil {
		return view{}, err
	}
	d.NodesShown, d.MoreNodes = len(nodes.Nodes), nodes.NextCursor != ""
	groups := map[api.RolloutStep][]api.NodeProgress{}
	previous := map[string]int{}
	var updated, notStarted, inFlight int
	wave := 0
	for _, n := range nodes.Nodes {
		groups[n.Step] = append(groups[n.Step], n)
		switch {
		case n.Step == api.Updated:
			updated++
			if n.Previous != nil {
				previous[n.Previous.Version]++
			} else {
				previous["no release"]++
			}
		case n.Step == api.Pending || n.Step == api.Draining:
			notStarted++
		case n.Step == api.Installing || n.Step == api.Verifying:
			inFlight++
			wave = max(wave, n.Wave+1)
		}
		if n.Step == api.Failed {
			d.Failures = append(d.Failures, n)
		}
	}
	for _, s := range api.RolloutSteps {
		if len(groups[s]) > 0 {
			d.Steps = append(d.Steps, stepGroup{Step: s, Nodes: groups[s]})
		}
	}
	d.InUse = ro.Counts.Draining + ro.Counts.Installing + ro.Counts.Verifying
	d.Allowed = ro.Settings.MaxUnavailable
	var back []string
	for _, v := range sortedKeys(previous) {
		back = append(back, fmt.Sprintf("%d to %s", previous[v], v))
	}
	slices.Sort(back)
	d.Previous = strings.Join(back, ", ")
	abort := fmt.Sprintf("Abort rollout %s of %s: ", ro.RolloutID, ro.Version)
	if ro.Settings.RollbackOnAbort && updated > 0 {
		abort += fmt.Sprintf("%d updated nodes go back (%s); ", updated, d.Previous)
	} else if updated > 0 {
		abort += fmt.Sprintf("%d updated nodes stay on %s (no rollback on abort); ", updated, ro.Version)
	}
	abort += fmt.Sprintf("%d not yet installing stay where they are, uncordoned", notStarted)
	if inFlight > 0 {
		abort += fmt.Sprintf("; %d installing (wave %d) finish or time out", inFlight, wave)
	}
	d.Confirm = map[string]string{
		"abort":  abort + ".",
		"pause":  fmt.Sprintf("Pause rollout %s: no further node starts; the %d in progress finish.", ro.RolloutID, d.InUse),
		"resume": fmt.Sprintf("Resume rollout %s: nodes start again, at most %d out of service at once.", ro.RolloutID, ro.Settings.MaxUnavailable),
	}
	return view{Name: "rollout", Data: d, ETag: tag}, nil
}
