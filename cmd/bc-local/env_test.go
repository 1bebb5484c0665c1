package main

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/app/rolloutapp"
	"github.com/bettercompute/control-plane/shared/devstack"
)

// The dev release key is pinned only while the user sets no pins of their
// own; an explicitly empty BC_RELEASE_KMS_KEYS means no KMS pins.
func TestDevEnvPinRule(t *testing.T) {
	root := "/repo"
	devFile, devKMS := filepath.Join(root, devstack.PinsFile), devstack.DevReleaseKeyID
	policy := filepath.Join(root, devstack.PolicyFile)
	for name, tc := range map[string]struct {
		user map[string]string
		want map[string]string // what devEnv adds
	}{
		"nothing set: the dev key, by file and by KMS": {nil,
			map[string]string{"BC_POLICY_FILE": policy, "BC_RELEASE_PINS_FILE": devFile, "BC_RELEASE_KMS_KEYS": devKMS}},
		"own pins file: only it": {map[string]string{"BC_RELEASE_PINS_FILE": "/mine.pem"},
			map[string]string{"BC_POLICY_FILE": policy}},
		"own pins file and no KMS keys": {map[string]string{"BC_RELEASE_PINS_FILE": "/mine.pem", "BC_RELEASE_KMS_KEYS": ""},
			map[string]string{"BC_POLICY_FILE": policy}},
		"inline pins: only them": {map[string]string{"BC_RELEASE_PINS": "-----BEGIN PUBLIC KEY-----…"},
			map[string]string{"BC_POLICY_FILE": policy}},
		"own pins and the dev KMS key asked for": {map[string]string{"BC_RELEASE_PINS_FILE": "/mine.pem", "BC_RELEASE_KMS_KEYS": devKMS},
			map[string]string{"BC_POLICY_FILE": policy}},
		"only KMS keys: only them": {map[string]string{"BC_RELEASE_KMS_KEYS": "alias/mine"},
			map[string]string{"BC_POLICY_FILE": policy}},
		"empty KMS keys: no KMS pins, nor the file": {map[string]string{"BC_RELEASE_KMS_KEYS": ""},
			map[string]string{"BC_POLICY_FILE": policy}},
		"remote Better IAM: no policy file": {map[string]string{"BC_IAM_URL": "http://iam"},
			map[string]string{"BC_RELEASE_PINS_FILE": devFile, "BC_RELEASE_KMS_KEYS": devKMS}},
		"own policy file kept": {map[string]string{"BC_POLICY_FILE": "/p.json"},
			map[string]string{"BC_RELEASE_PINS_FILE": devFile, "BC_RELEASE_KMS_KEYS": devKMS}},
	} {
		if tc.want == nil {
			tc.want = map[string]string{}
		}
		t.Run(name, func(t *testing.T) {
			got := devEnv(root, func(k string) (string, bool) { v, ok := tc.user[k]; return v, ok })
			// The dev release log key signs unless the user names a log key.
			tc.want["BC_RELEASE_LOG_KEY"], tc.want["BC_RELEASE_LOG_ORIGIN"] = devstack.DevReleaseLogKeyID, devstack.DevReleaseLogOrigin
			if !maps.Equal(got, tc.want) {
				t.Errorf("devEnv added %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPinReport(t *testing.T) {
	pins := []rolloutapp.Pin{
		{KeyID: "aa", Variable: "BC_RELEASE_PINS_FILE", From: "/repo/localstack/dev-release-pins.pem"},
		{KeyID: "bb", Variable: "BC_RELEASE_PINS"},
		{KeyID: "aa", Variable: "BC_RELEASE_KMS_KEYS", From: devstack.DevReleaseKeyID},
	}
	got := pinReport(pins, 1, map[string]string{"BC_RELEASE_PINS_FILE": "x", "BC_RELEASE_KMS_KEYS": "y"})
	for _, want := range []string{
		"threshold 1",
		"  aa  BC_RELEASE_PINS_FILE=/repo/localstack/dev-release-pins.pem (dev default)\n",
		"  bb  BC_RELEASE_PINS (inline)\n",
		"  aa  BC_RELEASE_KMS_KEYS=" + devstack.DevReleaseKeyID + " (dev default)\n",
		"To pin your own keys",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if got := pinReport(pins[1:2], 1, nil); strings.Contains(got, "dev default") || strings.Contains(got, "To pin your own") {
		t.Errorf("no defaults, yet:\n%s", got)
	}
}
