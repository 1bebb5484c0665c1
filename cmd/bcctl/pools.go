package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
)

// poolsShowCommand is `bcctl pools show POOL`: the pool's nodes over the next
// hours, drawn from pools.get and pools.usage alone.
func (c *cli) poolsShowCommand() *cobra.Command {
	o := showOptions{}
	cmd := &cobra.Command{
		Use:   "show POOL",
		Short: "Draw a pool's nodes over the next hours (utilisation now, whole nodes free)",
		Long: `Draws each resource of the pool as one row per node (the first --nodes) and one column per slot of
the span, each cell shaded by the share of the node's devices held then, under a header with the
pool-wide figures: utilisation now, whole nodes free now and for the whole span, and held
device-time. It reads pools.get and every page of pools.usage (one call per 100 nodes, so the
figures cover the whole pool however few rows are drawn). -o json prints the pools.usage pages
instead.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Pool, o.Tenant, o.JSON = args[0], c.tenant, c.output == "json"
			switch {
			case o.Tenant == "":
				return usageErr(errors.New("pools show: --tenant (or BC_TENANT) is required"))
			case o.Hours < 1 || o.Hours > api.MaxUsageHours:
				return usageErr(fmt.Errorf("pools show: --hours must be 1..%d", api.MaxUsageHours))
			case o.Nodes < 1:
				return usageErr(errors.New("pools show: --nodes must be at least 1"))
			}
			return c.showPool(cmd.Context(), c.out, o)
		},
	}
	cmd.Flags().StringVar(&o.Resource, "resource", "", "one resource (default: every resource of the pool)")
	cmd.Flags().IntVar(&o.Hours, "hours", 24, "span to draw, from now (1..24)")
	cmd.Flags().IntVar(&o.Nodes, "nodes", 64, "nodes to draw per resource")
	cmd.Flags().BoolVar(&o.ASCII, "ascii", false, "draw with ASCII shades")
	return cmd
}

type showOptions struct {
	Tenant, Pool, Resource string
	Hours, Nodes           int
	ASCII, JSON            bool
	From                   time.Time // zero: now
}

func (c *cli) showPool(ctx context.Context, w io.Writer, o showOptions) error {
	resources := []string{o.Resource}
	if o.Resource == "" {
		var got api.PoolResult
		if err := c.callJSON(ctx, "pools.get", map[string]any{"tenantId": o.Tenant, "poolId": o.Pool}, &got); err != nil {
			return err
		}
		resources = capacity.Pool{Pool: got.Pool}.ResourceNames() // sorted
	}
	var all [][]api.Usage
	for i, res := range resources {
		pages, err := c.usagePages(ctx, o, res)
		if err != nil {
			return err
		}
		all = append(all, pages)
		if !o.JSON {
			if i > 0 {
				fmt.Fprintln(w)
			}
			poolView{ASCII: o.ASCII, Rows: o.Nodes}.Draw(w, pages)
		}
	}
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return nil
}

// usagePages reads every pools.usage page of one resource, over one span
// from o.From (default now): the pool-wide figures need them all.
func (c *cli) usagePages(ctx context.Context, o showOptions, res string) ([]api.Usage, error) {
	var pages []api.Usage
	from := o.From
	if from.IsZero() {
		from = c.now().UTC()
	}
	in := map[string]any{"tenantId": o.Tenant, "poolId": o.Pool, "resource": res, "hours": o.Hours, "from": from,
		"limit": api.MaxUsageNodes}
	for {
		var out api.PoolUsageResult
		if err := c.callJSON(ctx, "pools.usage", in, &out); err != nil {
			return nil, err
		}
		pages = append(pages, out.Usage)
		if out.NextCursor == "" {
			break
		}
		in["cursor"] = out.NextCursor
	}
	return pages, nil
}

// callJSON calls a method with in as its body and decodes the answer.
func (c *cli) callJSON(ctx context.Context, method string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	raw, err := c.call(ctx, method, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: unexpected answer: %w", method, err)
	}
	return nil
}

// poolTable, poolsTable and usageTable print pools.create and get, list,
// and usage.
var (
	poolTable  = oneTable(func(w io.Writer, a api.PoolResult, _ time.Time) { printPool(w, a.Pool) })
	poolsTable = listTable(func(a api.ListPoolsResult) []api.Pool { return a.Pools }, printPools)
)

// usageTable prints pools.usage a page at a time: each node's holds, one
// row each (a node with none, one row).
func usageTable(w io.Writer, method string, pages [][]byte, _ time.Time) error {
	fmt.Fprintln(w, "NODE\tHELD NOW\tDEVICES\tSTART\tEND\tRESERVATION")
	for _, p := range pages {
		a, err := decodeAnswer[api.PoolUsageResult](method, p)
		if err != nil {
			return err
		}
		u := a.Usage
		for _, n := range u.Nodes {
			if len(n.Busy) == 0 {
				fmt.Fprintf(w, "%s\t%d/%d\t-\t\t\t\n", n.NodeID, n.BusyNow, n.Size)
			}
			for i, b := range n.Busy {
				node, now := n.NodeID, fmt.Sprintf("%d/%d", n.BusyNow, n.Size)
				if i > 0 {
					node, now = "", ""
				}
				// The hold's own window, not its part in the span.
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", node, now, idRanges(b.DeviceIDs), stamp(b.Window.Start), stamp(b.Window.End), dash(b.ReservationID))
			}
		}
	}
	return nil
}

func printPool(w io.Writer, p api.Pool) {
	fmt.Fprintf(w, "pool\t%s\nowner\t%s\ncreated\t%s\n\n", p.PoolID, p.OwnerTenantID, stamp(p.CreatedAt))
	fmt.Fprintln(w, "RESOURCE\tDEVICES\tNODE SIZE\tNODES")
	pool := capacity.Pool{Pool: p} // the layout the counts imply
	for _, r := range pool.ResourceNames() {
		t := pool.Topology(r)
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\n", r, t.Devices, t.NodeSize, t.Nodes())
	}
}

// printPools lists pools, one row each.
func printPools(w io.Writer, ps []api.Pool, _ time.Time) {
	fmt.Fprintln(w, "POOL\tOWNER\tRESOURCES\tCREATED")
	for _, p := range ps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.PoolID, p.OwnerTenantID, resourceList(p), stamp(p.CreatedAt))
	}
}

func resourceList(p api.Pool) string {
	var parts []string
	for _, r := range (capacity.Pool{Pool: p}).ResourceNames() {
		parts = append(parts, r+"×"+strconv.Itoa(p.Resources[r]))
	}
	return strings.Join(parts, ", ")
}
