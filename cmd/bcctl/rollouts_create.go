package main

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/rollout"
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
				"the last covers every node (100%); at most "+strconv.Itoa(api.MaxWaves)+"; required")
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
// refuses what rollout.CheckWaves refuses, before anything is sent, in
// flag terms and saying which wave.
func parseWaves(raw []string) ([]api.WaveSpec, error) {
	out := make([]api.WaveSpec, len(raw))
	for i, s := range raw {
		out[i] = parseWave(s)
	}
	var e *rollout.WaveError
	if err := rollout.CheckWaves(out); !errors.As(err, &e) {
		return out, err
	}
	if e.Rule == rollout.WaveCount {
		return nil, fmt.Errorf("--wave: %d waves, at most %d", len(raw), api.MaxWaves)
	}
	s, w := raw[e.Wave], out[e.Wave]
	var why string
	switch e.Rule {
	case rollout.WaveKind: // parseWave read neither
		why = "not a node count (5) or a percent (10%)"
	case rollout.WaveRange:
		why = fmt.Sprintf("a node count must be 1 to %d", rollout.MaxWaveNodes)
		if w.Percent != nil {
			why = "a percent must be 1% to 100%"
		}
	case rollout.WaveShrinks:
		if before := out[e.Earlier]; before.Nodes != nil {
			why = fmt.Sprintf("covers fewer nodes than wave %d (%d); waves are cumulative", e.Earlier+1, *before.Nodes)
		} else {
			why = fmt.Sprintf("a smaller percent than an earlier wave (%d%%); waves are cumulative", *before.Percent)
		}
	case rollout.WaveLast:
		return nil, fmt.Errorf("--wave %s: the last wave must cover every node: end with --wave 100%%", s)
	default:
		why = e.Error()
	}
	return nil, fmt.Errorf("--wave %s (wave %d): %s", s, e.Wave+1, why)
}

var wavePattern = regexp.MustCompile(`^([0-9]+)(%?)$`)

// parseWave reads one --wave: "5" (nodes) or "10%" (percent); anything else
// is neither, which rollout.CheckWaves refuses as a wave of no kind.
func parseWave(s string) api.WaveSpec {
	m := wavePattern.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return api.WaveSpec{}
	}
	n, err := strconv.Atoi(m[1])
	switch {
	case err != nil:
		return api.WaveSpec{}
	case m[2] == "%":
		return api.WaveSpec{Percent: &n}
	}
	return api.WaveSpec{Nodes: &n}
}

// checkBounds refuses an integer (or a duration's seconds) outside the
// field's catalog limits, before it is sent.
func checkBounds(f field, n int, raw string) error {
	if (f.Min == nil || int64(n) >= *f.Min) && (f.Max == nil || int64(n) <= *f.Max) {
		return nil
	}
	unit, show := "", func(v int64) string { return strconv.FormatInt(v, 10) }
	if f.kind() == "duration" {
		if raw != strconv.Itoa(n)+"s" {
			unit = " (" + strconv.Itoa(n) + "s)"
		}
		show = func(v int64) string { return span(time.Duration(v) * time.Second) }
	}
	var want string
	switch {
	case f.Min != nil && f.Max != nil:
		want = show(*f.Min) + " to " + show(*f.Max)
	case f.Min != nil:
		want = "at least " + show(*f.Min)
	default:
		want = "at most " + show(*f.Max)
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
