package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// outcome is an action's answer: what happened, in words, or the API's
// error in words; Link leads to what it made or refused.
type outcome struct {
	OK       bool
	Sentence string
	Problem  *Problem
	Link     string
	LinkText string
}

// action runs one method call for a button the viewer confirmed. The form
// names the object; the call is the method itself, with the viewer's token,
// so the API decides it as it decides a client's.
func (c *Console) action(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	if err := r.ParseForm(); err != nil || v.Tenant == "" {
		c.render(w, http.StatusBadRequest, "outcome", outcome{Problem: &Problem{Code: "INVALID_INPUT", Sentence: "The action's form could not be read."}})
		return
	}
	f := func(k string) string { return r.PostForm.Get(k) }
	ctx := r.Context()
	var o outcome
	var err error
	switch r.PathValue("action") {
	case "cordon":
		var out api.NodeResult
		reason := f("reason")
		if reason == "" {
			reason = "cordoned from the console"
		}
		err = c.cfg.Caller.Call(ctx, v, "nodes.cordon", map[string]any{"tenantId": v.Tenant, "poolId": f("pool"), "nodeId": f("node"), "reason": reason}, &out)
		o.Sentence = fmt.Sprintf("%s is cordoned: no new reservation is placed on it; what it holds is untouched.", f("node"))
	case "uncordon":
		var out api.NodeResult
		err = c.cfg.Caller.Call(ctx, v, "nodes.uncordon", map[string]any{"tenantId": v.Tenant, "poolId": f("pool"), "nodeId": f("node")}, &out)
		o.Sentence = fmt.Sprintf("The operator's cordon on %s is lifted.", f("node"))
	case "release":
		var out api.ReservationResult
		err = c.cfg.Caller.Call(ctx, v, "reservations.release", map[string]any{"tenantId": v.Tenant, "reservationId": f("reservation")}, &out)
		o.Sentence = fmt.Sprintf("Reservation %s is %s.", f("reservation"), out.Reservation.State)
	case "pause", "resume", "abort":
		verb := r.PathValue("action")
		var out api.RolloutResult
		in := map[string]any{"tenantId": v.Tenant, "rolloutId": f("rollout")}
		if reason := f("reason"); reason != "" {
			in["reason"] = reason
		}
		err = c.cfg.Caller.Call(ctx, v, "rollouts."+verb, in, &out)
		o.Sentence = fmt.Sprintf("Rollout %s is %s.", f("rollout"), out.Rollout.State)
	case "book":
		o, err = c.book(r, v)
	default:
		c.render(w, http.StatusNotFound, "outcome", outcome{Problem: &Problem{Code: "NOT_FOUND", Sentence: "No such action."}})
		return
	}
	if err != nil {
		p := problemOf(err)
		o = outcome{Problem: &p}
		var ce *CallError
		if errors.As(err, &ce) {
			if id := ce.Detail("reservationId"); id != "" {
				o.Link, o.LinkText = c.link(v, "/console/reservations/"+id), "the refused reservation "+id
			}
		}
		c.render(w, http.StatusOK, "outcome", o)
		return
	}
	o.OK = true
	// The page the action was made on loads its fragment again.
	w.Header().Set("HX-Trigger", "bc-refresh")
	c.render(w, http.StatusOK, "outcome", o)
}

// book is the availability answer's button: reservations.create of its
// first offering.
func (c *Console) book(r *http.Request, v Viewer) (outcome, error) {
	f := r.PostForm.Get
	count, err := strconv.Atoi(f("count"))
	if err != nil {
		return outcome{}, &CallError{Status: http.StatusBadRequest, Err: apierr.Invalid("constraint", "count", "count is not a number")}
	}
	end, err := time.Parse(time.RFC3339, f("end"))
	window := map[string]any{"end": end}
	if f("start") != "" {
		start, serr := time.Parse(time.RFC3339, f("start"))
		window["start"] = start
		err = errors.Join(err, serr)
	}
	if err != nil {
		return outcome{}, &CallError{Status: http.StatusBadRequest, Err: apierr.Invalid("constraint", "window", "the window is not RFC 3339")}
	}
	in := map[string]any{"tenantId": v.Tenant, "poolId": f("pool"), "resource": f("resource"), "count": count,
		"window": window, "topology": f("topology")}
	var out api.ReservationResult
	if err := c.cfg.Caller.Call(r.Context(), v, "reservations.create", in, &out); err != nil {
		return outcome{}, err
	}
	res := out.Reservation
	return outcome{Sentence: fmt.Sprintf("Booked: reservation %s, %d × %s on %d nodes, %s (%s).", res.ReservationID, res.Count, res.Resource, len(res.NodeIDs), spanWords(res.Window), res.State),
		Link: c.link(v, "/console/reservations/"+res.ReservationID), LinkText: "open reservation " + res.ReservationID}, nil
}
