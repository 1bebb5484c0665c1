package rollout

import (
	"fmt"

	"github.com/bettercompute/control-plane/shared/api"
)

// MaxWaveNodes bounds a wave's node count, as WaveSpec's tag states (a test
// keeps the two equal).
const MaxWaveNodes = 1_000_000

// WaveRule is a rule of CheckWaves.
type WaveRule int

const (
	WaveCount   WaveRule = iota + 1 // 1 to api.MaxWaves waves
	WaveKind                        // exactly one of nodes and percent
	WaveRange                       // a count of 1 to MaxWaveNodes, a percent of 1 to 100
	WaveShrinks                     // no fewer nodes, no smaller percent, than the wave of its kind before it
	WaveLast                        // a last wave that is a percent is 100
)

// WaveError says which wave breaks which rule of CheckWaves.
type WaveError struct {
	Wave    int // 0-based; -1 for WaveCount (the waves as a whole)
	Rule    WaveRule
	Earlier int // WaveShrinks: the wave of the same kind before it
}

func (e *WaveError) Error() string {
	field := fmt.Sprintf("waves[%d]", e.Wave)
	switch e.Rule {
	case WaveCount:
		return fmt.Sprintf("waves: give 1 to %d waves", api.MaxWaves)
	case WaveKind:
		return field + ": give exactly one of nodes and percent"
	case WaveRange:
		return fmt.Sprintf("%s: nodes must be 1 to %d, percent 1 to 100", field, MaxWaveNodes)
	case WaveShrinks:
		return fmt.Sprintf("%s: covers less than waves[%d] (waves are cumulative)", field, e.Earlier)
	case WaveLast:
		return field + ": the last wave must cover every node (100 percent)"
	}
	return field + ": invalid"
}

// CheckWaves checks the waves of a create as far as they can be without
// the rollout's node count (WaveSizes checks the rest against it), in
// order, and answers the first rule broken as a *WaveError. A count is
// compared with counts only, a percent with percents: which of 5 nodes and
// 10% covers more depends on the node count.
func CheckWaves(waves []api.WaveSpec) error {
	if len(waves) < 1 || len(waves) > api.MaxWaves {
		return &WaveError{Wave: -1, Rule: WaveCount}
	}
	lastNodes, lastPercent := -1, -1
	for i, w := range waves {
		switch {
		case (w.Nodes == nil) == (w.Percent == nil):
			return &WaveError{Wave: i, Rule: WaveKind}
		case w.Nodes != nil && (*w.Nodes < 1 || *w.Nodes > MaxWaveNodes),
			w.Percent != nil && (*w.Percent < 1 || *w.Percent > 100):
			return &WaveError{Wave: i, Rule: WaveRange}
		case w.Nodes != nil && lastNodes >= 0 && *w.Nodes < *waves[lastNodes].Nodes:
			return &WaveError{Wave: i, Rule: WaveShrinks, Earlier: lastNodes}
		case w.Percent != nil && lastPercent >= 0 && *w.Percent < *waves[lastPercent].Percent:
			return &WaveError{Wave: i, Rule: WaveShrinks, Earlier: lastPercent}
		case w.Nodes != nil:
			lastNodes = i
		default:
			lastPercent = i
		}
	}
	if last := len(waves) - 1; waves[last].Percent != nil && *waves[last].Percent != 100 {
		return &WaveError{Wave: last, Rule: WaveLast}
	}
	return nil
}
