package console

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
)

// availabilityView is the question as the form asked it and its answer in
// words; Book is the first offering's create, confirmed before it is sent.
type availabilityView struct {
	Count    string
	Hours    string
	Topology string
	Sentence string
	Quota    string
	Offers   []api.Offering
	Problem  *Problem
	Book     *bookIntent
}

type bookIntent struct {
	Pool, Resource, Topology string
	Count                    int
	Start, End               time.Time
	FromNow                  bool // book without window.start: from now
	Confirm                  string
}

func (c *Console) availability(ctx context.Context, v Viewer, poolID, resource string, q url.Values, now time.Time) availabilityView {
	av := availabilityView{Count: q.Get("count"), Hours: q.Get("hours"), Topology: q.Get("topology")}
	if av.Topology == "" {
		av.Topology = api.OnNodes
	}
	count, err1 := strconv.Atoi(av.Count)
	hours, err2 := strconv.Atoi(av.Hours)
	if err1 != nil || err2 != nil {
		av.Problem = &Problem{Code: "INVALID_INPUT", Sentence: "Give a count and a number of hours as whole numbers."}
		return av
	}
	in := map[string]any{"tenantId": v.Tenant, "poolId": poolID, "resource": resource, "count": count, "hours": hours, "topology": av.Topology}
	var out api.PoolAvailabilityResult
	if err := c.cfg.Caller.Call(ctx, v, "pools.availability", in, &out); err != nil {
		p := problemOf(err)
		av.Problem = &p
		return av
	}
	a := out.Availability
	av.Offers = a.Offerings
	ask := fmt.Sprintf("%d × %s (topology %s) for %d h", a.Count, a.Resource, a.Topology, a.Hours)
	if len(a.Offerings) == 0 {
		av.Sentence = fmt.Sprintf("%s: no start from %s to %s fits the pool as it stands now.", ask, hm(a.From), hm(a.To))
	} else {
		parts := make([]string, 0, len(a.Offerings))
		for _, o := range a.Offerings {
			if o.LatestStart.Equal(o.EarliestStart) {
				parts = append(parts, fmt.Sprintf("at %s (on %s)", hm(o.EarliestStart), plural(o.Nodes, "node")))
			} else {
				parts = append(parts, fmt.Sprintf("any hour from %s to %s (on %s)", hm(o.EarliestStart), hm(o.LatestStart), plural(o.Nodes, "node")))
			}
		}
		av.Sentence = fmt.Sprintf("%s can start %s.", ask, strings.Join(parts, "; or "))
		// The first start; one in the current hour is booked from now
		// (no window.start) to the offering's hour + hours, as the method
		// says its offerings are booked.
		first := a.Offerings[0]
		start, end := first.EarliestStart, first.EarliestStart.Add(time.Duration(a.Hours)*time.Hour)
		from := hm(start)
		if start.Before(now) {
			from = "now"
		}
		av.Book = &bookIntent{Pool: poolID, Resource: a.Resource, Topology: a.Topology, Count: a.Count, Start: start, End: end, FromNow: start.Before(now),
			Confirm: fmt.Sprintf("Book %d × %s (topology %s) from %s to %s? This calls reservations.create and charges %d to your quota.",
				a.Count, a.Resource, a.Topology, from, hm(end), a.Count)}
	}
	if a.Partial {
		av.Sentence += " Some hours could not be decided by a bounded search and are left out."
	}
	av.Quota = fmt.Sprintf("Your quota: %d of %d held", a.Quota.Used, a.Quota.Max)
	if a.Quota.Fits {
		av.Quota += fmt.Sprintf(" — %d more fit.", a.Count)
	} else {
		av.Quota += fmt.Sprintf(" — %d more do not fit: a create would be refused for quota.", a.Count)
		av.Book = nil
	}
	return av
}

// hm is a time for sentences: UTC, minutes.
func hm(t time.Time) string { return t.UTC().Format("Jan 02 15:04") + " UTC" }

// plural is "1 node", "2 nodes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
