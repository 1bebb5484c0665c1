// Package releasedb is the release domain's store on DynamoDB
// (registry.Store and registry.LogStore): the release items, the key
// layout and the conditional expressions. Every method is one read or one
// single-item conditional write (dynalite has no transactions); the
// protocol that orders them is shared/release/registry's.
package releasedb

import (
	"fmt"
	"time"

	"github.com/bettercompute/control-plane/shared/release"
)

// The items' attribute names beyond the table's keys (schema.AttrPK, AttrSK,
// AttrLSK, AttrTTL), each defined once (the dynamodbav tags below spell
// the same; TestAttributeNames holds them to these). They are short: they
// are stored (and billed) on every item.
const (
	attrState        = "state"        // a version item's registry.State (pending, claimed, recorded, refused)
	attrPendingAt    = "pendingAt"    // when the registration's pending write was made
	attrVersion      = "version"      // a version item's release version
	attrSeq          = "seq"          // the release's sequence (version items, the head, log entries)
	attrDigest       = "dig"          // the manifest digest: sha256: + hex of the signed statement
	attrLeaf         = "leaf"         // the release's log leaf hash (its payload's), 32 bytes
	attrLogIndex     = "li"           // a recorded release's entry in the log
	attrBinaries     = "binaries"     // the statement's binaries
	attrExpires      = "expires"      // the statement's expiry, if any
	attrSigners      = "signers"      // keyids of the pinned keys whose signatures verified
	attrRegisteredAt = "registeredAt" // when it was registered
	attrRegisteredBy = "registeredBy" // who registered it (tenantId, principal)
	attrVer          = "ver"          // the version the head (or a log entry) names
	attrEnvelope     = "env"          // an envelope item's manifest, the JSON as sent
	attrN            = "n"            // a count: the log's head, the checkpoint's size, the recorded mark
	attrHashes       = "hs"           // a log entry's stored hashes, concatenated, 32 bytes each
	attrNote         = "note"         // the checkpoint item's signed note
)

// Release items live in one partition: the channel head (the latest
// claimed sequence and the version and digest that claimed it), one item
// per version, ordered by sequence through the `ordered` LSI once recorded
// (only recorded items carry lsk, so lists see no other), and one envelope
// item per recorded version.
const (
	releasePK   = "RELEASE"
	releaseHead = "#HEAD"
)

func releaseSK(version string) string  { return "V#" + version }
func envelopeSK(version string) string { return "ENV#" + version }

// seqKey orders sequences as strings: 16 digits cover 2^53−1.
func seqKey(seq int64) string { return fmt.Sprintf("%016d", seq) }

// releaseItem is RELEASE / V#<version>. Worst case: 64 binaries of a
// 2,048-byte URL and their platform, digest and size (~140 KB), the
// signers, the audit and the 32-byte leaf hash — under 150 KB.
type releaseItem struct {
	PK           string           `dynamodbav:"pk"`
	SK           string           `dynamodbav:"sk"`
	LSK          string           `dynamodbav:"lsk,omitempty"`
	State        string           `dynamodbav:"state"`
	PendingAt    time.Time        `dynamodbav:"pendingAt"`
	Version      string           `dynamodbav:"version"`
	Sequence     int64            `dynamodbav:"seq"`
	Digest       string           `dynamodbav:"dig"`
	Leaf         []byte           `dynamodbav:"leaf"`
	LogIndex     *int64           `dynamodbav:"li,omitempty"`
	Binaries     []release.Binary `dynamodbav:"binaries"`
	Expires      *time.Time       `dynamodbav:"expires,omitempty"`
	Signers      []string         `dynamodbav:"signers"`
	RegisteredAt time.Time        `dynamodbav:"registeredAt"`
	RegisteredBy release.Audit    `dynamodbav:"registeredBy"`
}

// headItem is RELEASE / #HEAD, the channel head's claim (under 200 B).
type headItem struct {
	Seq int64  `dynamodbav:"seq"`
	Ver string `dynamodbav:"ver"`
	Dig string `dynamodbav:"dig"`
}

// envelopeItem is a recorded release's manifest, RELEASE / ENV#<version>.
// Worst case: the 256 KiB request body.
type envelopeItem struct {
	PK       string `dynamodbav:"pk"`
	SK       string `dynamodbav:"sk"`
	Digest   string `dynamodbav:"dig"`
	Manifest []byte `dynamodbav:"env"`
}

// The release log's items, in a partition of their own:
//
//	RLOG / HEAD              {n}: entries [0, n) are appended (entry n may
//	                         exist too: an append that crashed before moving
//	                         the head; the next append moves it)
//	RLOG / E#<index, 16 digits> {ver, seq, hs}: entry index — the release it
//	                         logs and the tree hashes its append stored
//	                         (release.StoredHashes: its leaf hash, then one
//	                         per subtree it completes)
//	RLOG / CP                {n, note}: the latest signed checkpoint
//	RLOG / REC               {n}: the recorded mark — the releases of
//	                         entries [0, n) are recorded
//
// Worst case: an entry item holds 64 hashes (an index of 2^63 − 1; 20 at a
// million releases) — 64 × 32 B + a 128-byte version and the key names,
// under 2.4 KB; the checkpoint item under 1.1 KB (release.MaxCheckpoint);
// the head and the mark under 40 B. None grows with anything but the log's
// size, and then only logarithmically. The entry's payload itself (the DSSE
// payload, up to 256 KiB) is not stored here: its leaf hash is, and the
// envelope item of the release holds the payload.
const (
	logPK   = "RLOG"
	logHead = "HEAD"
	logCP   = "CP"
	logRec  = "REC"
)

func logSK(i int64) string { return fmt.Sprintf("E#%016d", i) }

// countItem is the log's head or its recorded mark.
type countItem struct {
	PK string `dynamodbav:"pk"`
	SK string `dynamodbav:"sk"`
	N  int64  `dynamodbav:"n"`
}

type logEntryItem struct {
	PK  string `dynamodbav:"pk"`
	SK  string `dynamodbav:"sk"`
	Ver string `dynamodbav:"ver"`
	Seq int64  `dynamodbav:"seq"`
	// HS is the entry's stored hashes, concatenated in order (32 bytes
	// each): one binary attribute, since a binary set (what [][]byte
	// marshals to) has no order in DynamoDB.
	HS []byte `dynamodbav:"hs"`
}

type logCPItem struct {
	PK   string `dynamodbav:"pk"`
	SK   string `dynamodbav:"sk"`
	N    int64  `dynamodbav:"n"`
	Note string `dynamodbav:"note"`
}
