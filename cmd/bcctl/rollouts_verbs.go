package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
)

// rolloutVerbs are the verbs that change a rollout's state: the state each
// moves a rollout to, from which states.
var rolloutVerbs = map[string]struct {
	to   api.RolloutState
	from []api.RolloutState
}{
	"rollouts.pause":  {api.Paused, []api.RolloutState{api.Progressing}},
	"rollouts.resume": {api.Progressing, []api.RolloutState{api.Paused}},
	"rollouts.abort":  {api.Aborting, []api.RolloutState{api.Progressing, api.Paused}},
}

// rolloutBefore is the state of the rollout a pause, resume or abort is
// about to change ("" when it is no such verb, or the read failed: the
// verb's own call reports why). The API answers a rollout it did not
// change as it is, with no error, so only the state before tells a second
// abort from the first.
func (c *cli) rolloutBefore(cmd *cobra.Command, m *api.Method, body map[string]any) api.RolloutState {
	if _, ok := rolloutVerbs[m.Name]; !ok {
		return ""
	}
	var got api.RolloutResult
	if c.callJSON(cmd.Context(), "rollouts.get", map[string]any{"tenantId": body["tenantId"], "rolloutId": body["rolloutId"]}, &got) != nil {
		return ""
	}
	return got.Rollout.State
}

// unchangedNote says plainly on stderr when a pause, resume or abort
// changed nothing: the rollout was already in that state, or finished, or
// in a state the verb does not leave. The exit code stays 0: the API
// answers such a call with the rollout unchanged, no error (docs/rollouts.md).
func (c *cli) unchangedNote(method string, before api.RolloutState, answer []byte, reason string) {
	verb, ok := rolloutVerbs[method]
	var a api.RolloutResult
	if !ok || json.Unmarshal(answer, &a) != nil {
		return
	}
	r := a.Rollout
	if r.State == verb.to && (before == "" || slices.Contains(verb.from, before)) {
		return // this call changed it
	}
	name := strings.TrimPrefix(method, "rollouts.")
	var note string
	switch {
	case r.State.Terminal():
		note = fmt.Sprintf("rollout %s was already %s, a finished rollout: the %s changed nothing", r.RolloutID, r.State, name)
	case r.State == verb.to:
		note = fmt.Sprintf("rollout %s was already %s: the %s changed nothing", r.RolloutID, r.State, name)
	default:
		from := make([]string, len(verb.from))
		for i, s := range verb.from {
			from[i] = string(s)
		}
		note = fmt.Sprintf("rollout %s is %s: the %s changed nothing (it changes a %s rollout only)", r.RolloutID, r.State, name, strings.Join(from, " or "))
	}
	if reason != "" {
		note += fmt.Sprintf("; its --reason %q was not recorded", reason)
	}
	fmt.Fprintf(c.errOut, "bcctl: %s\n", note)
}
