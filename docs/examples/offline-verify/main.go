// Command offline-verify checks a release's entry in the release log, and
// that the log only grew since a checkpoint kept earlier, from the API's
// answers alone, with no code of the control plane (docs/releases.md).
//
//	go run ./docs/examples/offline-verify VKEY proof.json manifest.json [old-checkpoint]
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	tnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func main() {
	if len(os.Args) < 4 {
		fail("usage: offline-verify VKEY proof.json manifest.json [old-checkpoint]")
	}
	// x/mod/sumdb/note verifies Ed25519 keys only: its NewVerifier answers
	// "invalid verifier hash" for the log's ECDSA P-256 key (signature type
	// 0x02). transparency-dev/formats/note reads both, as a note.Verifier.
	v, err := tnote.NewVerifier(os.Args[1])
	check("verifier key", err)

	var proof struct {
		Checkpoint  string   `json:"checkpoint"`
		Index       int64    `json:"index"`
		Inclusion   []string `json:"inclusion"`
		Consistency []string `json:"consistency"`
	}
	readJSON(os.Args[2], &proof)
	size, root := open(v, []byte(proof.Checkpoint))

	// The entry is the release's DSSE payload, exactly as signed.
	var envelope struct {
		Payload string `json:"payload"`
	}
	readJSON(os.Args[3], &envelope)
	entry, err := base64.StdEncoding.DecodeString(envelope.Payload)
	check("manifest payload", err)
	check("inclusion", tlog.CheckRecord(hashes(proof.Inclusion), size, root, proof.Index, tlog.RecordHash(entry)))
	fmt.Printf("entry %d is in the tree of size %d (root %s)\n", proof.Index, size, base64.StdEncoding.EncodeToString(root[:]))

	if len(os.Args) > 4 {
		old, err := os.ReadFile(os.Args[4])
		check("old checkpoint", err)
		oldSize, oldRoot := open(v, old)
		if oldSize > 0 { // every tree extends the empty one
			check("consistency", tlog.CheckTree(hashes(proof.Consistency), size, root, oldSize, oldRoot))
		}
		fmt.Printf("the tree of size %d extends the kept one of size %d\n", size, oldSize)
	}
}

// open verifies a signed checkpoint under v and returns its size and root:
// the note's text is the origin (v's name), the size and the base64 root.
func open(v note.Verifier, signed []byte) (int64, tlog.Hash) {
	n, err := note.Open(signed, note.VerifierList(v))
	check("checkpoint signature", err)
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[0] != v.Name() {
		fail("checkpoint: not a checkpoint of " + v.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	check("checkpoint size", err)
	root := hashes([]string{lines[2]})
	return size, root[0]
}

func hashes(b64 []string) []tlog.Hash {
	out := make([]tlog.Hash, len(b64))
	for i, s := range b64 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != tlog.HashSize {
			fail("proof: hash " + strconv.Quote(s) + " is not a base64 SHA-256 hash")
		}
		copy(out[i][:], b)
	}
	return out
}

func readJSON(file string, v any) {
	data, err := os.ReadFile(file)
	check(file, err)
	check(file, json.Unmarshal(data, v))
}

func check(what string, err error) {
	if err != nil {
		fail(what + ": " + err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "refused:", msg)
	os.Exit(1)
}
