package console

import (
	"context"
	"net/http"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

type releasesData struct {
	page
	Releases    []releaseRow
	ListProblem *Problem
	Log         *api.ReleaseLogResult
	LogProblem  *Problem
}

// releaseRow is a release and the evidence the browser checks: its entry's
// index, the inclusion proof, the checkpoint it is proved in and, when the
// API answers it, the entry itself (the release's signed statement).
type releaseRow struct {
	release.Release
	Proof   *api.ProveResult
	Problem *Problem
}

// releasesProved bounds the releases whose inclusion the page proves.
const releasesProved = 20

func (c *Console) releasesPage(ctx context.Context, r *http.Request, v Viewer) (view, error) {
	d := releasesData{page: c.newPage(r, v)}
	var log api.ReleaseLogResult
	if err := c.cfg.Caller.Call(ctx, v, "releases.log", map[string]any{"tenantId": v.Tenant}, &log); err != nil {
		p := problemOf(err)
		d.LogProblem = &p
	} else {
		d.Log = &log
	}
	var list api.ListReleasesResult
	if err := c.cfg.Caller.Call(ctx, v, "releases.list", map[string]any{"tenantId": v.Tenant, "limit": 100}, &list); err != nil {
		p := problemOf(err)
		d.ListProblem = &p
	}
	for i, rel := range list.Releases {
		row := releaseRow{Release: rel}
		if i < releasesProved && d.Log != nil {
			var proof api.ProveResult
			if err := c.cfg.Caller.Call(ctx, v, "releases.prove", map[string]any{"tenantId": v.Tenant, "version": rel.Version, "size": log.Size}, &proof); err != nil {
				p := problemOf(err)
				row.Problem = &p
			} else {
				row.Proof = &proof
			}
		}
		d.Releases = append(d.Releases, row)
	}
	return view{Name: "releases", Data: d}, nil
}
