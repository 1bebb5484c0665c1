package release

import (
	"errors"
	"time"
)

// PayloadType is the only DSSE payload type a manifest may carry.
const PayloadType = "application/vnd.bettercompute.release.v1+json"

// Binary is one per-platform build of bcd.
type Binary struct {
	Platform string `json:"platform" bc:"required,pattern=platform" doc:"os/arch or os/arch/variant, lowercase (linux/arm64)"`
	URL      string `json:"url" bc:"required,max=2048" doc:"where the binary is fetched from: an https URL, or file:///path on the node"`
	SHA256   string `json:"sha256" bc:"required,pattern=sha256hex" doc:"hex SHA-256 of the binary"`
	Size     int64  `json:"size" bc:"required,min=1" doc:"the binary's size in bytes"`
}

// Statement is the manifest's release: the signed release statement (the
// DSSE payload), as the release's signers wrote it. Its recorded form is
// Release.
type Statement struct {
	Version  string     `json:"version" bc:"required,max=64"`
	Sequence int64      `json:"sequence" bc:"required,min=1,max=9007199254740991,strictint"`
	Expires  *time.Time `json:"expires"`
	Binaries []Binary   `json:"binaries" bc:"required,min=1,max=64"`
}

// Release is a recorded release: a verified Statement as the control plane
// stored it and the API answers it (releases.register, releases.list).
type Release struct {
	Version        string     `json:"version" doc:"SemVer 2.0 version (build metadata makes a distinct version)"`
	Sequence       int64      `json:"sequence" doc:"the release channel's order (1..2^53-1): each registered release has a sequence above every earlier one"`
	Binaries       []Binary   `json:"binaries" doc:"one build per platform"`
	Expires        *time.Time `json:"expires,omitempty" doc:"the statement's expiry, when it has one: a manifest past it is no longer registered"`
	ManifestDigest string     `json:"manifestDigest" doc:"sha256: + hex SHA-256 of the envelope's decoded payload (the signed statement)"`
	Signers        []string   `json:"signers" doc:"keyids of the pinned keys whose signatures verified, sorted (hex SHA-256 of each key's SubjectPublicKeyInfo DER)"`
	RegisteredAt   time.Time  `json:"registeredAt" doc:"when it was recorded (millisecond precision)"`
	RegisteredBy   Audit      `json:"registeredBy" doc:"who registered it, for audit"`

	// Manifest is the envelope as registered (the JSON of the request's
	// manifest): what a node is sent to verify under its own pins. Not in
	// lists.
	Manifest []byte `json:"-"`
	// Payload is the envelope's decoded payload (the statement as signed):
	// the release's entry in the release log. Only on registration.
	Payload []byte `json:"-"`
	// Log is where the release is in the release log: its entry's index,
	// and (from a registration) the signed checkpoint that covers it.
	Log *LogEntry `json:"-"`
}

// LogEntry is a recorded release's place in the release log.
type LogEntry struct {
	Index      int64  `json:"index" doc:"the release's entry in the release log (from 0, in registration order)"`
	Checkpoint string `json:"checkpoint" doc:"a signed checkpoint (C2SP tlog-checkpoint as a signed note) of a tree that includes the entry"`
}

// ErrNotFound: no recorded release of that version.
var ErrNotFound = errors.New("release: not found")

// Audit records who registered a release (or created a rollout).
type Audit struct {
	TenantID  string `json:"tenantId" doc:"the tenantId of the register call"`
	Principal string `json:"principal" doc:"the authenticated principal that called it"`
}
