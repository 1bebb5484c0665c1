package rollout

import (
	"reflect"
	"testing"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

func TestCheckWaves(t *testing.T) {
	n := func(v int) api.WaveSpec { return api.WaveSpec{Nodes: &v} }
	p := func(v int) api.WaveSpec { return api.WaveSpec{Percent: &v} }
	eleven := make([]api.WaveSpec, api.MaxWaves+1)
	for i := range eleven {
		eleven[i] = n(i + 1)
	}
	for _, c := range []struct {
		name  string
		waves []api.WaveSpec
		want  *WaveError // nil: valid
	}{
		{"percents", []api.WaveSpec{n(1), p(10), p(100)}, nil},
		{"counts, the last checked against the nodes later", []api.WaveSpec{n(5), n(5), n(20)}, nil},
		{"kinds compared apart", []api.WaveSpec{n(5), p(10), n(8), p(100)}, nil},
		{"at most", eleven[:api.MaxWaves], nil},
		{"none", nil, &WaveError{Wave: -1, Rule: WaveCount}},
		{"too many", eleven, &WaveError{Wave: -1, Rule: WaveCount}},
		{"neither", []api.WaveSpec{n(1), {}}, &WaveError{Wave: 1, Rule: WaveKind}},
		{"both", []api.WaveSpec{{Nodes: new(1), Percent: new(100)}}, &WaveError{Wave: 0, Rule: WaveKind}},
		{"no nodes", []api.WaveSpec{n(0)}, &WaveError{Wave: 0, Rule: WaveRange}},
		{"too many nodes", []api.WaveSpec{n(MaxWaveNodes + 1)}, &WaveError{Wave: 0, Rule: WaveRange}},
		{"no percent", []api.WaveSpec{p(0), p(100)}, &WaveError{Wave: 0, Rule: WaveRange}},
		{"over 100", []api.WaveSpec{p(101)}, &WaveError{Wave: 0, Rule: WaveRange}},
		{"fewer nodes", []api.WaveSpec{n(4), p(10), n(2), p(100)}, &WaveError{Wave: 2, Rule: WaveShrinks, Earlier: 0}},
		{"smaller percent", []api.WaveSpec{p(50), n(3), p(20), p(100)}, &WaveError{Wave: 2, Rule: WaveShrinks, Earlier: 0}},
		{"the first broken wave", []api.WaveSpec{n(4), n(2), n(0)}, &WaveError{Wave: 1, Rule: WaveShrinks, Earlier: 0}},
		{"last percent short", []api.WaveSpec{n(1), p(50)}, &WaveError{Wave: 1, Rule: WaveLast}},
	} {
		err := CheckWaves(c.waves)
		switch got, _ := err.(*WaveError); {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != nil && (got == nil || *got != *c.want):
			t.Errorf("%s: %#v, want %#v", c.name, err, c.want)
		}
	}
}

// The bounds CheckWaves applies are the ones WaveSpec's tags state (and
// the API decodes with).
func TestCheckWavesBoundsAreTheTags(t *testing.T) {
	for _, f := range strictjson.Fields(reflect.TypeFor[api.WaveSpec]()) {
		want := map[string]int64{"nodes": MaxWaveNodes, "percent": 100}[f.Name]
		if f.Min == nil || *f.Min != 1 || f.Max == nil || *f.Max != want {
			t.Errorf("WaveSpec.%s: bounds %v..%v, want 1..%d", f.Name, f.Min, f.Max, want)
		}
	}
}
