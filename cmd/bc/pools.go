package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/client"
)

// pools runs `bc pools show POOL`: the pool's nodes over the next hours,
// drawn from pools.get and pools.usage alone.
func pools(args []string) error {
	if len(args) < 1 || args[0] != "show" {
		return errors.New("pools: usage: bc pools show POOL [-tenant T] [-resource R] [-hours H] [-nodes N] [-ascii] [-json]")
	}
	fs := flag.NewFlagSet("pools show", flag.ContinueOnError)
	tenant := fs.String("tenant", os.Getenv("BC_TENANT"), "tenant to act as (default $BC_TENANT)")
	resource := fs.String("resource", "", "one resource (default: every resource of the pool)")
	hours := fs.Int("hours", 24, "span to draw, from now (1..24)")
	nodes := fs.Int("nodes", 64, "nodes to draw per resource (pages of 100 are read until then)")
	ascii := fs.Bool("ascii", false, "draw with ASCII shades")
	asJSON := fs.Bool("json", false, "print the pools.usage pages as JSON instead")
	var pool string
	rest := args[1:]
	if len(rest) > 0 && rest[0] != "" && rest[0][0] != '-' {
		pool, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if pool == "" && fs.NArg() > 0 {
		pool = fs.Arg(0)
	}
	switch {
	case pool == "":
		return errors.New("pools show: POOL is required")
	case *tenant == "":
		return errors.New("pools show: -tenant (or BC_TENANT) is required")
	case *hours < 1 || *hours > capacity.MaxUsageHours:
		return fmt.Errorf("pools show: -hours must be 1..%d", capacity.MaxUsageHours)
	case *nodes < 1:
		return errors.New("pools show: -nodes must be at least 1")
	}
	c := client.New(envOr("BC_API_URL", "http://127.0.0.1:8080"), envOr("BC_TOKEN", "dev:admin"))
	return showPool(context.Background(), c, os.Stdout, showOptions{Tenant: *tenant, Pool: pool, Resource: *resource,
		Hours: *hours, Nodes: *nodes, ASCII: *ascii, JSON: *asJSON})
}

type showOptions struct {
	Tenant, Pool, Resource string
	Hours, Nodes           int
	ASCII, JSON            bool
	From                   time.Time // zero: now, to the minute
}

func showPool(ctx context.Context, c *client.Client, w io.Writer, o showOptions) error {
	resources := []string{o.Resource}
	if o.Resource == "" {
		var got struct {
			Pool capacity.Pool `json:"pool"`
		}
		if err := c.Call(ctx, "pools.get", map[string]any{"tenantId": o.Tenant, "poolId": o.Pool}, &got); err != nil {
			return err
		}
		resources = got.Pool.ResourceNames()
		sort.Strings(resources)
	}
	var all [][]capacity.Usage
	for i, res := range resources {
		pages, err := usagePages(ctx, c, o, res)
		if err != nil {
			return err
		}
		all = append(all, pages)
		if !o.JSON {
			if i > 0 {
				fmt.Fprintln(w)
			}
			poolView{ASCII: o.ASCII}.Draw(w, pages)
		}
	}
	if o.JSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return nil
}

// usagePages reads pools.usage pages of one resource until o.Nodes nodes
// (the first page fixes the span's start for the others).
func usagePages(ctx context.Context, c *client.Client, o showOptions, res string) ([]capacity.Usage, error) {
	var pages []capacity.Usage
	from := o.From
	if from.IsZero() {
		from = time.Now().UTC().Truncate(time.Minute)
	}
	in := map[string]any{"tenantId": o.Tenant, "poolId": o.Pool, "resource": res, "hours": o.Hours, "from": from}
	shown := 0
	for shown < o.Nodes {
		in["limit"] = min(capacity.MaxUsageNodes, o.Nodes-shown)
		var out struct {
			Usage      capacity.Usage `json:"usage"`
			NextCursor string         `json:"nextCursor"`
		}
		if err := c.Call(ctx, "pools.usage", in, &out); err != nil {
			return nil, err
		}
		pages = append(pages, out.Usage)
		shown += len(out.Usage.Nodes)
		if out.NextCursor == "" {
			break
		}
		in["cursor"] = out.NextCursor
	}
	return pages, nil
}
