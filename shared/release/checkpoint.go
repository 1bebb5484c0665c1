package release

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"
)

// MaxCheckpoint bounds a signed checkpoint's size (text and one signature
// line with a DER ECDSA signature, well under this).
const MaxCheckpoint = 1024

// Checkpoint is a tlog-checkpoint's body: the log's origin, its size and the
// root hash of the tree of that size.
type Checkpoint struct {
	Origin string
	Size   int64
	Root   tlog.Hash
}

// Text is the checkpoint's note text (c2sp.org/tlog-checkpoint): the origin,
// the size in decimal and the base64 root, each line ending in a newline.
func (c Checkpoint) Text() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// ParseCheckpoint reads a checkpoint's note text. Extension lines (allowed
// by the C2SP format) are refused: this log writes none, so one is a
// checkpoint this log did not write.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	if !bytes.HasSuffix(text, []byte("\n")) {
		return Checkpoint{}, fmt.Errorf("checkpoint: no final newline")
	}
	lines := strings.Split(string(text[:len(text)-1]), "\n")
	if len(lines) != 3 {
		return Checkpoint{}, fmt.Errorf("checkpoint: %d lines, want 3 (origin, size, root)", len(lines))
	}
	var c Checkpoint
	c.Origin = lines[0]
	if c.Origin == "" {
		return Checkpoint{}, fmt.Errorf("checkpoint: empty origin")
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("checkpoint: size %q is not a decimal size", lines[1])
	}
	c.Size = n
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return Checkpoint{}, fmt.Errorf("checkpoint: root %q is not a base64 SHA-256 hash", lines[2])
	}
	copy(c.Root[:], root)
	return c, nil
}

// LeafHash is entry's leaf hash, SHA-256(0x00 ‖ entry).
func LeafHash(entry []byte) tlog.Hash { return tlog.RecordHash(entry) }
