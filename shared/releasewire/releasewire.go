// Package releasewire holds the release types of the API's contract — the
// signed statement and its binaries, the recorded release, its place in the
// release log, the registration's audit — with the patterns their tags name
// and the reasons a manifest is refused for: a leaf that shared/api imports
// without importing a domain (shared/rollout imports shared/api, so the API
// cannot import it back).
//
// It stands in for shared/release's leaf until that package is merged:
// then these move there and this package goes.
package releasewire

import (
	"time"

	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// Patterns named by the tags of Binary: a platform is os/arch or
// os/arch/variant in lowercase (docs/reference/releases.md); a digest is
// lowercase hex.
var (
	_ = strictjson.RegisterPattern("platform", `^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9_.]+)?$`)
	_ = strictjson.RegisterPattern("sha256hex", `^[0-9a-f]{64}$`)
)

// Reasons carried in details.reason of a rejected manifest
// (docs/reference/releases.md): the envelope's (package dsse), then the
// statement's.
const (
	ReasonMalformed         = dsse.ReasonMalformed
	ReasonPayloadType       = dsse.ReasonPayloadType
	ReasonUnknownKey        = dsse.ReasonUnknownKey
	ReasonBadSignature      = dsse.ReasonBadSignature
	ReasonThreshold         = dsse.ReasonThreshold
	ReasonInvalidField      = "invalid_field"
	ReasonExpired           = "expired"
	ReasonDuplicatePlatform = "duplicate_platform"
	ReasonNoLinuxBinary     = "no_linux_binary"
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

// Statement is the signed release statement (the DSSE payload).
type Statement struct {
	Version  string     `json:"version" bc:"required,max=64"`
	Sequence int64      `json:"sequence" bc:"required,min=1,max=9007199254740991,strictint"`
	Expires  *time.Time `json:"expires"`
	Binaries []Binary   `json:"binaries" bc:"required,min=1,max=64"`
}

// Release is a recorded release.
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

// LogEntry is a release's place in the release log.
type LogEntry struct {
	Index      int64  `json:"index" doc:"the release's entry in the release log (from 0, in registration order)"`
	Checkpoint string `json:"checkpoint" doc:"a signed checkpoint (C2SP tlog-checkpoint as a signed note) of a tree that includes the entry"`
}

// Audit records who registered a release.
type Audit struct {
	TenantID  string `json:"tenantId" doc:"the tenantId of the register call"`
	Principal string `json:"principal" doc:"the authenticated principal that called it"`
}
