// Package release is what everyone who handles a bcd release shares: the
// manifest's signed statement (Statement, Binary, PayloadType) and the
// reasons a manifest is refused; the release pins and the verification of
// a DSSE envelope under them (Pins.Verify); the recorded release as the API
// answers it (Release, LogEntry, Audit); and the release log's client side:
// every registered release is an entry of one append-only Merkle tree
// (RFC 6962 / RFC 9162 hashing, golang.org/x/mod/sumdb/tlog's tree), whose
// size and root the log key signs as a C2SP tlog-checkpoint in a C2SP
// signed note (Checkpoint, LogKey, LogSigner), with the tree's proofs and
// a node's check of the evidence it is told (VerifyEvidence).
//
// It is a leaf: the agent, bcctl and the API import it with nothing else
// of the control plane. Registration and the log's appends are the domain
// service's (shared/release/registry); where the tree's hashes live
// (shared/dynamo/releasedb) and who signs (KMS, shared/kmssign) it is
// given.
package release
