package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	tlogfmt "github.com/transparency-dev/formats/log"
	tnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/dsse"
	"github.com/bettercompute/control-plane/shared/release"
)

// logTable prints releases.log: the signed checkpoint exactly as signed
// (`bcctl releases log > checkpoint` keeps it for a later verify).
var logTable = oneTable(func(w io.Writer, a api.ReleaseLogResult, _ time.Time) { io.WriteString(w, a.Checkpoint) })

// releasesVerifyCommand is `bcctl releases verify VERSION`: the release's
// inclusion in the log, and the log's consistency with the checkpoint
// verified last, checked offline from releases.prove's answer with
// transparency-dev's verifiers (not this repository's releaselog).
func (c *cli) releasesVerifyCommand() *cobra.Command {
	prove := api.Lookup("releases.prove")
	var manifestFile, vkey, checkpointFile string
	var noCheckpoint bool
	cmd := &cobra.Command{
		Use:   "verify VERSION --manifest FILE [--log-key VKEY] [--checkpoint FILE | --no-checkpoint]",
		Short: "Prove a release is in the release log, offline, with an independent verifier",
		Long: `Asks releases.prove for VERSION's inclusion proof and the consistency proof from the checkpoint
verified last, then checks offline, with transparency-dev's note, checkpoint and Merkle verifiers:
the checkpoint is signed by the log key (--log-key, a C2SP signed-note verifier key, default
$BC_RELEASE_LOG_VKEY; its name is the log's origin), the release's entry — the DSSE payload of
--manifest, exactly as signed — is in its tree, and that tree extends the stored one. The verified
checkpoint then replaces the stored one (none yet: a first run), so every later run is a monitor:
a log that ever drops, changes or reorders an entry fails consistency. The checkpoint is kept per
log origin in the user's config directory (` + "`" + `bettercompute/releaselog/ORIGIN.checkpoint` + "`" + ` under
$XDG_CONFIG_HOME, ~/.config, or ~/Library/Application Support on macOS), or in --checkpoint FILE
(default $BC_RELEASE_LOG_CHECKPOINT); --no-checkpoint neither reads nor keeps one.
Exit 0: verified; 1: refused (the reason is printed) or an API error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			version := args[0]
			if vkey == "" {
				vkey = c.getenv("BC_RELEASE_LOG_VKEY")
			}
			if vkey == "" || manifestFile == "" {
				return usageErr(errors.New("releases verify: --manifest and --log-key (or BC_RELEASE_LOG_VKEY) are required"))
			}
			verifier, err := tnote.NewVerifier(vkey)
			if err != nil {
				return usageErr(fmt.Errorf("releases verify: --log-key: %w", err))
			}
			entry, err := manifestPayload(manifestFile, version)
			if err != nil {
				return localErr(err)
			}
			if noCheckpoint && cmd.Flags().Changed("checkpoint") {
				return usageErr(errors.New("releases verify: --checkpoint and --no-checkpoint exclude each other"))
			}
			if !noCheckpoint && checkpointFile == "" {
				if checkpointFile = c.getenv("BC_RELEASE_LOG_CHECKPOINT"); checkpointFile == "" {
					if checkpointFile, err = c.checkpointPath(verifier.Name()); err != nil {
						return localErr(err)
					}
				}
			}
			var stored *tlogfmt.Checkpoint
			if checkpointFile != "" {
				if stored, err = readStoredCheckpoint(checkpointFile, verifier); err != nil {
					return localErr(err)
				}
			}
			in := map[string]any{"tenantId": c.tenantOf(cmd, prove), "version": version}
			if stored != nil {
				in["fromSize"] = stored.Size
			}
			var p api.ProveResult
			if err := c.callJSON(cmd.Context(), prove.Name, in, &p); err != nil {
				return err
			}
			cp, err := verifyProof(verifier, stored, p, entry)
			if err != nil {
				fmt.Fprintf(c.errOut, "bcctl: release %s: refused: %v\n", version, err)
				return exitCode(exitAPIError)
			}
			from := "no stored checkpoint"
			if checkpointFile != "" {
				if err := os.MkdirAll(filepath.Dir(checkpointFile), 0o700); err != nil {
					return localErr(err)
				}
				if err := writeAtomic(checkpointFile, []byte(p.Checkpoint)); err != nil {
					return localErr(err)
				}
				from = "no stored checkpoint (the first run: this one is kept in " + checkpointFile + ")"
			}
			if stored != nil {
				from = fmt.Sprintf("consistent with the stored checkpoint of size %d (%s)", stored.Size, checkpointFile)
			}
			fmt.Fprintf(c.out, "release %s is entry %d of %s\ncheckpoint: size %d, root %s, signed by %s\ninclusion: verified\nconsistency: %s\n",
				version, *p.Index, verifier.Name(), cp.Size, base64.StdEncoding.EncodeToString(cp.Hash), verifier.Name(), from)
			return nil
		},
	}
	cmd.Flags().StringVar(&manifestFile, "manifest", "", "the release's DSSE envelope (as registered): its payload is the log entry")
	cmd.Flags().StringVar(&vkey, "log-key", "", "the log's signed-note verifier key (default $BC_RELEASE_LOG_VKEY; bcctl pubkey --log-origin prints it)")
	cmd.Flags().StringVar(&checkpointFile, "checkpoint", "", "the checkpoint verified last: consistency is proved from it, and the new one replaces it (default $BC_RELEASE_LOG_CHECKPOINT, else one per origin in the user's config directory)")
	cmd.Flags().BoolVar(&noCheckpoint, "no-checkpoint", false, "neither read nor keep a checkpoint (no consistency check)")
	return cmd
}

// checkpointPath is where verify keeps the checkpoint of the log origin:
// the user's config directory (XDG_CONFIG_HOME read through the CLI's
// environment, else os.UserConfigDir), one file per origin.
func (c *cli) checkpointPath(origin string) (string, error) {
	dir := c.getenv("XDG_CONFIG_HOME")
	if dir == "" {
		var err error
		if dir, err = os.UserConfigDir(); err != nil {
			return "", fmt.Errorf("no config directory for the stored checkpoint (%w): give --checkpoint FILE", err)
		}
	}
	return filepath.Join(dir, "bettercompute", "releaselog", url.PathEscape(origin)+".checkpoint"), nil
}

// manifestPayload is the DSSE payload of the envelope in file: the log
// entry of the release it signs, which must be version.
func manifestPayload(file, version string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	payload, err := dsse.Payload(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var st struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(payload, &st); err != nil || st.Version != version {
		return nil, fmt.Errorf("%s signs release %q, not %q", file, st.Version, version)
	}
	return payload, nil
}

// readStoredCheckpoint is the checkpoint in file, which must verify
// (nil: no file yet).
func readStoredCheckpoint(file string, v note.Verifier) (*tlogfmt.Checkpoint, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cp, _, _, err := tlogfmt.ParseCheckpoint(data, v.Name(), v)
	if err != nil {
		return nil, fmt.Errorf("%s: the stored checkpoint does not verify under the log key: %w", file, err)
	}
	return cp, nil
}

// verifyProof checks p for entry: the checkpoint under v, the inclusion,
// and consistency with stored. It returns the checkpoint.
func verifyProof(v note.Verifier, stored *tlogfmt.Checkpoint, p api.ProveResult, entry []byte) (*tlogfmt.Checkpoint, error) {
	cp, _, _, err := tlogfmt.ParseCheckpoint([]byte(p.Checkpoint), v.Name(), v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", release.ErrCheckpointSignature, err)
	}
	if p.Index == nil {
		return nil, fmt.Errorf("%s: the answer has no index", release.ErrProof)
	}
	h := rfc6962.DefaultHasher
	incl, err := decode(p.Inclusion)
	if err != nil {
		return nil, err
	}
	if err := proof.VerifyInclusion(h, uint64(*p.Index), cp.Size, h.HashLeaf(entry), incl, cp.Hash); err != nil {
		return nil, fmt.Errorf("%s: entry %d in size %d: %w", release.ErrInclusion, *p.Index, cp.Size, err)
	}
	if stored != nil {
		cons, err := decode(p.Consistency)
		if err != nil {
			return nil, err
		}
		if cp.Size < stored.Size {
			return nil, fmt.Errorf("%s: size %d, the stored checkpoint's is %d", release.ErrStale, cp.Size, stored.Size)
		}
		if err := proof.VerifyConsistency(h, stored.Size, cp.Size, cons, stored.Hash, cp.Hash); err != nil {
			return nil, fmt.Errorf("%s: from size %d to %d: %w", release.ErrConsistency, stored.Size, cp.Size, err)
		}
	}
	return cp, nil
}

func decode(ss []string) ([][]byte, error) {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b) != 32 {
			return nil, fmt.Errorf("%s: hash %q", release.ErrProof, strings.TrimSpace(s))
		}
		out[i] = b
	}
	return out, nil
}

// writeAtomic replaces file with data (a temporary file renamed over it):
// a crash leaves the old checkpoint or the new.
func writeAtomic(file string, data []byte) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}
