package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

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
				case api.Completed:
					// A completed rollout that left nodes behind is not a
					// success: a script waiting on it must not go on as if
					// every node ran the version.
					if short := shortfall(r, p.Nodes, p.Partial); short != "" {
						fmt.Fprintf(c.errOut, "bcctl: rollout %s completed, but %s\n", r.RolloutID, short)
						fmt.Fprintf(c.errOut, "    bcctl rollouts nodes %s --step %s lists them.\n", r.RolloutID, shortStep(r.Counts))
						return exitCode(exitAPIError)
					}
					return nil
				case api.RolledBack, api.Aborted:
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
	p := rolloutPicture{Rollout: got.Rollout, Nodes: []api.NodeProgress{}}
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

// shortfall says, for a completed rollout, which nodes it did not update
// and where the version runs ("" when it updated every node): "2 of 2
// nodes skipped (no_binary): 1.1.0 runs on none of them". The reasons
// come from the nodes read (partial: only the first of them).
func shortfall(r api.Rollout, nodes []api.NodeProgress, partial bool) string {
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
	add(c.Skipped, "skipped"+reasonKinds(nodes, api.Skipped, partial))
	add(c.Failed, "failed"+reasonKinds(nodes, api.Failed, partial))
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
func shortStep(c api.Counts) api.RolloutStep {
	if c.Skipped == 0 && c.Failed > 0 {
		return api.Failed
	}
	return api.Skipped
}

// reasonKinds is " (no_binary)" or " (1 no_binary, 1 busy)": the reasons of
// the nodes read in step, each cut to its kind (install: … → install).
func reasonKinds(nodes []api.NodeProgress, step api.RolloutStep, partial bool) string {
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
