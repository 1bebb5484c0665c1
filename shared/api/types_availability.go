package api

import "time"

// Availability limits (pools.availability): the window is whole hours, up
// to the longest window a reservation may have; the starts searched span
// at most a month.
const (
	MaxAvailabilityHours    = int(MaxWindow / time.Hour) // 2,160: a 90-day window
	DefaultAvailabilitySpan = 7 * 24 * time.Hour
	MaxAvailabilitySpan     = 31 * 24 * time.Hour
	DefaultOfferings        = 5
	MaxOfferings            = 20
)

// Availability answers when a reservation of Count devices of Resource,
// spread as Topology, for Hours whole hours could be placed in the pool as
// it stands now, its start between From and To.
//
// Each offering is a range of window starts, on whole UTC hours: for every
// start s from EarliestStart to LatestStart, hour by hour, a
// reservations.create of this count and topology with the window
// [s, s + hours) would be placed. A console draws an offering on a
// timeline as the starts [EarliestStart, LatestStart] and the time they
// can cover, [EarliestStart, LatestStart + hours). The first offering may
// begin at the current hour, which has started: its window is then booked
// from now (window.start left out) until EarliestStart + hours.
//
// Offerings are advice, not holds: a create made after the answer may
// still be refused if something else was booked in between.
type Availability struct {
	PoolID    string     `json:"poolId" doc:"the pool"`
	Resource  string     `json:"resource" doc:"the pool's resource"`
	Count     int        `json:"count" doc:"the devices asked for"`
	Hours     int        `json:"hours" doc:"the window's length in whole hours"`
	Topology  string     `json:"topology" enum:"topology" doc:"how the devices are spread over nodes"`
	From      time.Time  `json:"from" doc:"the earliest start searched: the request's from, or now (an earlier from counts as now)"`
	To        time.Time  `json:"to" doc:"the latest start searched: the request's to, or from + ${capacity.DefaultAvailabilitySpan}"`
	Offerings []Offering `json:"offerings" doc:"the maximal ranges of whole-hour starts at which a reservation would be placed, earliest first, at most limit of them; empty when none is"`
	Quota     QuotaFit   `json:"quota" doc:"the tenant's quota for the pool and resource now: quota is held per reservation whatever its window, so it does not depend on the start"`
	Partial   bool       `json:"partial" doc:"true when the search could not decide some start before the last offering answered (or before to, when fewer than limit are): it left that start out, so an offering may be shorter, or missing, where the pool has more free devices than the search reads per hour. Never set because a start was refused: an offered start is always one the search found devices for"`
}

// Offering is one range of whole-hour starts that would be placed.
type Offering struct {
	EarliestStart time.Time `json:"earliestStart" doc:"the first start of the range, on a whole UTC hour; the current hour (earlier than now) means from now"`
	LatestStart   time.Time `json:"latestStart" doc:"the last start of the range, on a whole UTC hour (equal to earliestStart for a single start)"`
	Nodes         int       `json:"nodes" doc:"how many nodes a placement at earliestStart takes: 1 for a count that fits a node and ⌈count / nodeSize⌉ for a larger one under topology node; under any, the nodes of the placement the search found (a create, which takes the fullest nodes first, may spread it over more)"`
}

// QuotaFit is a tenant's quota row and whether the count fits it now.
type QuotaFit struct {
	Max  int64 `json:"max" doc:"the quota's max (0 for a missing row)"`
	Used int64 `json:"used" doc:"what the tenant's live reservations hold charged"`
	Fits bool  `json:"fits" doc:"max − used ≥ count: a create would not be refused QUOTA_EXCEEDED now"`
}
