// Package rollout registers and lists signed bcd releases (SPEC §4.1–4.2).
// It knows nothing of Lambda or DynamoDB: it verifies DSSE manifests under
// the release pins and records releases through the Store interface.
package rollout

import (
	"time"
)

// PayloadType is the only DSSE payload type a manifest may carry.
const PayloadType = "application/vnd.bettercompute.release.v1+json"

// Binary is one per-platform build of bcd.
type Binary struct {
	Platform string `json:"platform" bc:"required,pattern=platform"`
	URL      string `json:"url" bc:"required,max=2048"`
	SHA256   string `json:"sha256" bc:"required,pattern=sha256hex"`
	Size     int64  `json:"size" bc:"required,min=1"`
}

// Statement is the signed release statement (the DSSE payload).
type Statement struct {
	Version  string     `json:"version" bc:"required,max=64"`
	Sequence int64      `json:"sequence" bc:"required,min=1,max=9007199254740991"`
	Expires  *time.Time `json:"expires"`
	Binaries []Binary   `json:"binaries" bc:"required,min=1,max=64"`
}

// Release is a recorded release.
type Release struct {
	Version        string     `json:"version"`
	Sequence       int64      `json:"sequence"`
	Binaries       []Binary   `json:"binaries"`
	Expires        *time.Time `json:"expires,omitempty"`
	ManifestDigest string     `json:"manifestDigest"`
	Signers        []string   `json:"signers"`
	RegisteredAt   time.Time  `json:"registeredAt"`
	RegisteredBy   Audit      `json:"registeredBy"`
}

// Audit records who registered a release.
type Audit struct {
	TenantID  string `json:"tenantId"`
	Principal string `json:"principal"`
}
