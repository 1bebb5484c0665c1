package main

import (
	"context"
	"crypto"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// defaultPlatform is the platform nodes register takes without --platform.
const defaultPlatform = "linux/amd64"

// nodesRegisterCommand is `bcctl nodes register NODE`: nodes.register with
// the node's key read from a file (a private key's public half, or a
// public key), checked before it is sent: a private key never is.
func (c *cli) nodesRegisterCommand(m *api.Method) *cobra.Command {
	fields := fieldsOf(m)
	usage := map[string]string{}
	for i := range fields {
		if fields[i].Name == "platform" {
			fields[i].Required = false // --platform has a default
		}
		usage[fields[i].Name] = fields[i].usage()
	}
	var pool, keyFile, publicFile, platform string
	var replace bool
	cmd := &cobra.Command{
		Use:   "register NODE --pool POOL (--key KEY.pem | --public-key-file PUBLIC.pem) [--platform os/arch] [--replace]",
		Short: m.Brief(),
		Long: methodHelp(m, fields) + `

The node's key: --key reads a private key file (PKCS#8 or SEC1 PEM, as bcctl keygen writes) and sends
only its public key; --public-key-file reads a PEM PUBLIC KEY. Either is checked before it is sent.
--platform defaults to ` + defaultPlatform + `. A node's key and platform stay as first registered:
registering it again with another is CONFLICT, unless --replace is given (a host re-imaged, a key lost):
the node keeps its reservations, bindings and cordon, and is not placed on until its agent's first
healthy heartbeat under the new key.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case c.tenant == "":
				return usageErr(fmt.Errorf("%s: --tenant (or BC_TENANT) is required", m.Name))
			case pool == "":
				return usageErr(fmt.Errorf("%s: --%s is required", m.Name, flagOf("poolId")))
			}
			publicKey, err := nodePublicKey(keyFile, publicFile)
			if err != nil {
				return err
			}
			body := map[string]any{"tenantId": c.tenant, "poolId": pool, "nodeId": args[0], "publicKey": publicKey, "platform": platform}
			if replace {
				body["replace"] = true
			}
			return c.invoke(cmd, m, body, false)
		},
	}
	cmd.Flags().StringVar(&pool, flagOf("poolId"), "", usage["poolId"])
	cmd.Flags().StringVar(&keyFile, "key", "", "the node's private key file (PEM): only its public key is sent")
	cmd.Flags().StringVar(&publicFile, "public-key-file", "", "the node's public key file (PEM PUBLIC KEY)")
	cmd.Flags().StringVar(&platform, flagOf("platform"), defaultPlatform, usage["platform"])
	cmd.Flags().BoolVar(&replace, flagOf("replace"), false, usage["replace"])
	return cmd
}

// nodePublicKey reads the key a node registers with, as one PEM PUBLIC KEY:
// the public key of the private key in keyFile, or the public key in
// publicFile (exactly one of them is given).
func nodePublicKey(keyFile, publicFile string) (string, error) {
	var pub crypto.PublicKey
	switch {
	case keyFile != "" && publicFile != "":
		return "", usageErr(errors.New("nodes register: give one of --key and --public-key-file, not both"))
	case keyFile != "":
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return "", localErr(err)
		}
		if hasPEMBlock(data, "PUBLIC KEY") {
			return "", localErr(fmt.Errorf("--key %s holds a public key: give it as --public-key-file %s", keyFile, keyFile))
		}
		k, err := dsse.ParsePrivateKeyPEM(data)
		if err != nil {
			return "", localErr(fmt.Errorf("--key %s: %w", keyFile, err))
		}
		pub = k.Public()
	case publicFile != "":
		data, err := os.ReadFile(publicFile)
		if err != nil {
			return "", localErr(err)
		}
		if hasPEMBlock(data, "PRIVATE KEY") || hasPEMBlock(data, "EC PRIVATE KEY") {
			return "", localErr(fmt.Errorf("--public-key-file %s holds a private key (not sent): give it as --key %s, "+
				"and only its public key is sent", publicFile, publicFile))
		}
		keys, err := dsse.ParsePEMBundle(data)
		if err != nil {
			return "", localErr(fmt.Errorf("--public-key-file %s: %w", publicFile, err))
		}
		if len(keys) != 1 {
			return "", localErr(fmt.Errorf("--public-key-file %s holds %d public keys; a node has one", publicFile, len(keys)))
		}
		pub = keys[0]
	default:
		return "", usageErr(errors.New("nodes register: give the node's key: --key KEY.pem (a private key) or --public-key-file PUBLIC.pem"))
	}
	out, err := dsse.MarshalPublicKeyPEM(pub)
	if err != nil {
		return "", localErr(err)
	}
	return string(out), nil
}

// hasPEMBlock reports whether data holds a PEM block of the type.
func hasPEMBlock(data []byte, blockType string) bool {
	for {
		block, rest := pem.Decode(data)
		if block == nil {
			return false
		}
		if block.Type == blockType {
			return true
		}
		data = rest
	}
}

// nodeTable and nodesTable print nodes.register, get, cordon and uncordon
// (one node), and nodes.list.
var (
	nodeTable  = oneTable(func(w io.Writer, a api.NodeResult, now time.Time) { printNode(w, a.Node, now) })
	nodesTable = listTable(func(a api.ListNodesResult) []api.Node { return a.Nodes }, printNodes)
)

// printNode prints one node: its fields, then what it is told to bind and
// unbind now, the unbinds first (as the API lists them).
func printNode(w io.Writer, n api.Node, now time.Time) {
	last := "never"
	if n.LastHeartbeatAt != nil {
		last = stamp(*n.LastHeartbeatAt) + " (" + ago(n.LastHeartbeatAt, now) + ")"
	}
	running := "-"
	if n.Running != nil {
		running = fmt.Sprintf("%s (sequence %d)", n.Running.Version, n.Running.Sequence)
	}
	cordon := "-"
	if n.Cordon != nil {
		cordon = cordonText(n.Cordon) + ": " + n.Cordon.Reason + " (since " + stamp(n.Cordon.At) + ")"
	}
	bindings := "none"
	if len(n.Bindings) > 0 {
		bindings = bindingCount(n.Bindings)
	}
	fmt.Fprintf(w, "node\t%s\npool\t%s\nstate\t%s\nplatform\t%s\nkeyid\t%s\nregistered\t%s\n", n.NodeID, n.PoolID, n.State, n.Platform, n.KeyID, stamp(n.CreatedAt))
	fmt.Fprintf(w, "last heartbeat\t%s\nrunning\t%s\nhealth\t%s\nrelease log\t%s\ncordon\t%s\nbindings\t%s\n", last, running, healthText(n.Health),
		witnessText(n.Log), cordon, bindings)
	if len(n.Bindings) == 0 {
		return
	}
	fmt.Fprintln(w, "\nACTION\tRESERVATION\tTENANT\tDEVICES\tWINDOW\tREPORTED")
	for _, b := range n.Bindings {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s → %s\t%s\n", b.Action, b.ReservationID, b.TenantID, idRanges(b.DeviceIDs),
			stamp(b.Window.Start), stamp(b.Window.End), dash(b.Reported))
	}
}

// printNodes lists nodes, one row each.
func printNodes(w io.Writer, ns []api.Node, now time.Time) {
	fmt.Fprintln(w, "NODE\tSTATE\tLAST HEARTBEAT\tRUNNING\tCORDON\tBINDINGS")
	for _, n := range ns {
		running, cordon := "-", "-"
		if n.Running != nil {
			running = n.Running.Version
		}
		if c := n.Cordon; c != nil {
			cordon = cordonText(c)
			if c.By == api.ByOperator {
				cordon += ": " + shorten(c.Reason, 40)
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", n.NodeID, n.State, ago(n.LastHeartbeatAt, now), running, cordon, bindingCount(n.Bindings))
	}
}

// cordonText names who holds a cordon: "operator", or "rollout <id>".
func cordonText(c *api.Cordon) string {
	if c.By == api.ByRollout && c.RolloutID != "" {
		return "rollout " + c.RolloutID
	}
	return c.By
}

// bindingCount is how many binds and unbinds a node is told, and of those
// how many it has not reported done (a bind not yet bound, an unbind not
// yet unbound) and how many it reported failed.
func bindingCount(bs []api.NodeBinding) string {
	pending, failed := 0, 0
	for _, b := range bs {
		done := api.BindBound
		if b.Action == api.ActionUnbind {
			done = api.BindUnbound
		}
		switch b.Reported {
		case done:
		case api.BindFailed:
			failed++
		default:
			pending++
		}
	}
	var parts []string
	if pending > 0 {
		parts = append(parts, fmt.Sprintf("%d pending", pending))
	}
	if failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", failed))
	}
	if len(parts) == 0 {
		return fmt.Sprint(len(bs))
	}
	return fmt.Sprintf("%d (%s)", len(bs), strings.Join(parts, ", "))
}

// healthText is a node's last reported health in one line: its devices,
// and its checks (the failed ones by name, with what they found).
func healthText(h *api.Health) string {
	if h == nil {
		return "- (no heartbeat yet)"
	}
	s := fmt.Sprintf("%d/%d devices visible", h.DevicesVisible, h.DevicesExpected)
	var failed []string
	for _, c := range h.Checks {
		if c.OK {
			continue
		}
		f := c.Name
		if c.Detail != nil && *c.Detail != "" {
			f += " (" + *c.Detail + ")"
		}
		failed = append(failed, f)
	}
	switch {
	case len(h.Checks) == 0:
		return s + ", no checks"
	case len(failed) == 0:
		return s + ", " + strictjson.Plural(len(h.Checks), "check") + " passed"
	}
	return fmt.Sprintf("%s, %d of %s failed: %s", s, len(failed), strictjson.Plural(len(h.Checks), "check"), strings.Join(failed, "; "))
}

// ago says how long before now t was, in whole minutes (rounded down, as
// relative times in flags are): "<1m ago", "5m ago", "2h5m ago", "3d4h ago";
// "never" for no time. A time more than a minute ahead of now (the clocks
// disagree) is printed as it is.
func ago(t *time.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	d := now.Sub(*t)
	if d < -time.Minute {
		return stamp(*t)
	}
	return minutes(d) + " ago"
}

// minutes is a span in whole minutes, rounded down: "<1m", "5m", "2h5m",
// "3d4h" (the days' minutes left out).
func minutes(d time.Duration) string {
	if d < time.Minute {
		return "<1m"
	}
	const day = 24 * time.Hour
	days, hours, mins := int(d/day), int(d%day/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case days > 0 && hours > 0:
		return fmt.Sprintf("%dd%dh", days, hours)
	case days > 0:
		return fmt.Sprintf("%dd", days)
	case hours > 0 && mins > 0:
		return fmt.Sprintf("%dh%dm", hours, mins)
	case hours > 0:
		return fmt.Sprintf("%dh", hours)
	}
	return fmt.Sprintf("%dm", mins)
}

// shorten cuts s to at most n characters, marking the cut with "…".
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// witnessText is a node's witness of the release log: the checkpoint it
// verified last and whether the log ever had it (a split view quarantines
// the node until it is re-registered).
func witnessText(l *api.NodeLog) string {
	switch {
	case l == nil:
		return "no checkpoint reported"
	case !l.Consistent && l.SplitView != nil:
		return fmt.Sprintf("SPLIT VIEW: reported size %d root %s, which the log never had (since %s); told no release until re-registered (nodes register --replace)",
			l.SplitView.Size, shorten(l.SplitView.Root, 16), stamp(l.SplitView.At))
	case !l.Consistent:
		return fmt.Sprintf("SPLIT VIEW at size %d; told no release until re-registered (nodes register --replace)", l.Size)
	}
	return fmt.Sprintf("consistent (size %d, root %s)", l.Size, shorten(l.Root, 16))
}

// nodesListFleet is `bcctl nodes list` without --pool: the nodes of every
// pool the tenant owns (offered pools' nodes are their owners'), pool by
// pool, each read page by page (--limit a page, default 100). Without
// --all it stops after one page's worth of rows and says on stderr how to
// see the rest.
func (c *cli) nodesListFleet(ctx context.Context, body map[string]any, all bool) error {
	tenant, _ := body["tenantId"].(string)
	limit := 100
	if n, ok := body["limit"].(int); ok {
		limit = n
	}
	var owned []string
	in := map[string]any{"tenantId": tenant, "limit": 1000}
	for {
		var page api.ListPoolsResult
		if err := c.callJSON(ctx, "pools.list", in, &page); err != nil {
			return err
		}
		for _, p := range page.Pools {
			if p.OwnerTenantID == tenant {
				owned = append(owned, p.PoolID)
			}
		}
		if page.NextCursor == "" {
			break
		}
		in["cursor"] = page.NextCursor
	}
	var nodes []api.Node
	more := false
pools:
	for i, pool := range owned {
		in := map[string]any{"tenantId": tenant, "poolId": pool, "limit": limit}
		if st, ok := body["state"]; ok {
			in["state"] = st
		}
		for {
			var page api.ListNodesResult
			if err := c.callJSON(ctx, "nodes.list", in, &page); err != nil {
				return err
			}
			nodes = append(nodes, page.Nodes...)
			if !all && len(nodes) >= limit {
				more = page.NextCursor != "" || i < len(owned)-1
				nodes = nodes[:min(len(nodes), limit)]
				break pools
			}
			if page.NextCursor == "" {
				break
			}
			in["cursor"] = page.NextCursor
		}
	}
	if c.output == "json" {
		if nodes == nil {
			nodes = []api.Node{}
		}
		raw, err := json.Marshal(api.ListNodesResult{Nodes: nodes})
		if err != nil {
			return err
		}
		if err := writeJSON(c.out, raw); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		printFleetNodes(tw, nodes, c.now())
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case len(owned) == 0:
		fmt.Fprintf(c.errOut, "bcctl: tenant %s owns no pool: no nodes to list\n", tenant)
	case more:
		fmt.Fprintf(c.errOut, "bcctl: %s of %s shown; more follow: --all prints every pool's, --pool POOL one pool's\n",
			strictjson.Plural(len(nodes), "node"), strictjson.Plural(len(owned), "pool"))
	}
	return nil
}

// printFleetNodes is printNodes with each node's pool first.
func printFleetNodes(w io.Writer, ns []api.Node, now time.Time) {
	var b strings.Builder
	printNodes(&b, ns, now)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	fmt.Fprintln(w, "POOL\t"+lines[0])
	for i, n := range ns {
		fmt.Fprintln(w, n.PoolID+"\t"+lines[i+1])
	}
}
