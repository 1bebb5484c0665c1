// Package rollout registers and lists signed bcd releases (docs/reference/releases.md).
// It knows nothing of Lambda or DynamoDB: it verifies DSSE manifests under
// the release pins and records releases through the Store interface.
package rollout

import "github.com/bettercompute/control-plane/shared/releasewire"

// The release types are the API's (package releasewire, a leaf the API
// imports); these names keep the release side's vocabulary.
const PayloadType = releasewire.PayloadType

type (
	Binary    = releasewire.Binary
	Statement = releasewire.Statement
	Release   = releasewire.Release
	LogEntry  = releasewire.LogEntry
	Audit     = releasewire.Audit
)
