// Package paging holds the one shape every domain's list takes: a page
// request (how many, after which key). It sits below the domains so
// capacity, fleet and rollout page alike without leaning on each other;
// the cursor that carries After over the wire is package cursor's.
package paging

// Page asks for at most Limit items after the key After (nil: from the start).
type Page struct {
	Limit int
	After map[string]string
}

// DefaultLimit is a list's page size when the request sets none.
const DefaultLimit = 100
