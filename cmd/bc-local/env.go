package main

import (
	"fmt"
	"strings"

	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/devstack"
)

// pinVars are the settings of the release pins.
var pinVars = []string{"BC_RELEASE_PINS_FILE", "BC_RELEASE_PINS", "BC_RELEASE_KMS_KEYS"}

// devEnv is what `make run` adds to the user's environment (lookup is
// os.LookupEnv): the dev configuration under localstack/ for what was left
// unset.
//
// Release pins: while none of pinVars is set, the dev release key is pinned
// by its PEM file and by the seeded local-kms key (the same key). Once any
// of them is set, even to empty, exactly what is set is pinned: the dev key
// never rides along behind a user's own pins, and BC_RELEASE_KMS_KEYS=
// means no KMS pins.
func devEnv(root string, lookup func(string) (string, bool)) map[string]string {
	dev := devstack.DevDefaults(root)
	given := func(k string) bool { v, _ := lookup(k); return v != "" }
	env := map[string]string{}
	if !given("BC_POLICY_FILE") && !given("BC_IAM_URL") {
		env["BC_POLICY_FILE"] = dev["BC_POLICY_FILE"]
	}
	userPins := false
	for _, k := range pinVars {
		_, set := lookup(k)
		userPins = userPins || set
	}
	if !given("BC_RELEASE_LOG_KEY") {
		env["BC_RELEASE_LOG_KEY"], env["BC_RELEASE_LOG_ORIGIN"] = dev["BC_RELEASE_LOG_KEY"], dev["BC_RELEASE_LOG_ORIGIN"]
	}
	if !userPins {
		env["BC_RELEASE_PINS_FILE"] = dev["BC_RELEASE_PINS_FILE"]
		env["BC_RELEASE_KMS_KEYS"] = dev["BC_RELEASE_KMS_KEYS"]
	}
	return env
}

// pinReport lists the effective release pins, one a line: keyid, the
// setting that pinned it, and whether that setting is make run's default.
func pinReport(pins []rolloutapp.Pin, threshold int, defaulted map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Release pins (threshold %d; a key pinned twice counts once):\n", threshold)
	dev := false
	for _, p := range pins {
		from := p.Variable + "=" + p.From
		if p.From == "" {
			from = p.Variable + " (inline)"
		}
		if _, ok := defaulted[p.Variable]; ok {
			from, dev = from+" (dev default)", true
		}
		fmt.Fprintf(&b, "  %s  %s\n", p.KeyID, from)
	}
	if dev {
		fmt.Fprintf(&b, "  To pin your own keys instead, set %s (README, Configuration).\n", strings.Join(pinVars, ", "))
	}
	return b.String()
}
