package console

import (
	"errors"
	"fmt"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
)

// Problem is an API error said in words, with its code kept visible.
type Problem struct {
	Code      string
	Sentence  string
	Message   string // the API's own message
	RequestID string
}

// problemOf words an error of a call.
func problemOf(err error) Problem {
	var ce *CallError
	if !errors.As(err, &ce) {
		return Problem{Code: string(apierr.Internal), Sentence: "The console could not build this page.", Message: err.Error()}
	}
	p := Problem{Code: string(ce.Err.Code), Message: ce.Err.Message, RequestID: ce.RequestID}
	switch ce.Err.Code {
	case apierr.Unauthenticated:
		p.Sentence = "You are not signed in, or your sign-in expired: sign in again."
	case apierr.PermissionDenied:
		p.Sentence = "You have no grant for this: the API refused it (PERMISSION_DENIED). Ask an administrator for the permission named below."
	case apierr.NotFound:
		p.Sentence = "Not found: it does not exist, or it is not visible to the tenant you act as."
	case apierr.QuotaExceeded:
		p.Sentence = fmt.Sprintf("Refused: your quota allows %s, %s are held already and %s more were asked.",
			ce.Detail("max"), ce.Detail("used"), ce.Detail("requested"))
	case apierr.CapacityExhausted:
		p.Sentence = refusalWords(ce.Detail("reason"))
	case apierr.Conflict:
		p.Sentence = "Refused: it contradicts what is stored (CONFLICT)."
	case apierr.InvalidInput:
		p.Sentence = "The request was refused as invalid"
		if f := ce.Detail("field"); f != "" {
			p.Sentence += " (field " + f + ")"
		}
		p.Sentence += "."
	case apierr.Unavailable:
		p.Sentence = "A dependency of the API failed: retry in a moment."
	case apierr.NotImplemented:
		p.Sentence = "This deployment does not serve that method yet."
	default:
		p.Sentence = "The API failed; quote the request id."
	}
	return p
}

// refusalWords says why a reservation was refused (its reason).
func refusalWords(reason string) string {
	switch reason {
	case api.ReasonCapacity:
		return "Refused: not enough devices of that resource are free for the whole window (capacity)."
	case api.ReasonTopology:
		return "Refused: enough devices are free, but not on few enough nodes for the topology asked (topology)."
	case api.ReasonQuota:
		return "Refused: the tenant's quota on this pool did not fit the count (quota)."
	case api.ReasonInvalid:
		return "Refused: the pool or resource does not exist for the tenant (invalid)."
	case api.ReasonStale:
		return "Expired: the create never finished and was fenced by the reconciler (stale)."
	case "":
		return ""
	}
	return "Refused (" + reason + ")."
}

// reservationWhy says in words why a reservation is where it is.
func reservationWhy(r api.Reservation) string {
	switch r.State {
	case api.Denied:
		return "Denied: Better IAM refused the request on its draft, before anything about the pool was checked."
	case api.Rejected, api.Expired:
		return refusalWords(r.Reason)
	case api.Released:
		if r.ReleasedBy == api.ReleasedByEnd {
			return "Released at its window's end."
		}
		return "Released by its tenant."
	case api.Placed:
		return "Placed: its devices are held for the window; it binds when the window starts."
	case api.Binding:
		return "Binding: its nodes have been told to bind it; it is active once each reports it bound."
	case api.Active:
		return "Active: bound on every node that holds its devices."
	case api.Draft:
		return "Draft: the create is in flight."
	}
	return ""
}

var historyWords = map[string]string{
	api.ReasonNodeUnreachable: "a node holding it was unreachable at its start",
	api.ReasonReplaced:        "moved onto free ready devices",
	api.ReasonDisrupted:       "a rollout installed a release on one of its nodes while it held them",
}
