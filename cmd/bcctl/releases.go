package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/release"
)

// releasesGetCommand is `bcctl releases get VERSION`: one release, looked up
// in releases.list. The API has no releases.get; releases are few (one per
// build of bcd) and a list without limit answers all of them.
func (c *cli) releasesGetCommand() *cobra.Command {
	list := api.Lookup("releases.list")
	return &cobra.Command{
		Use:   "get VERSION",
		Short: "Show one registered release: its sequence, expiry, signers and binaries",
		Long: fmt.Sprintf(`Shows one registered release as releases register does: its sequence, expiry, manifest digest,
signers and binaries. The API has no releases.get: bcctl reads releases.list and picks the release
whose version is VERSION, exactly (build metadata makes another version); authorization
%s @ %s, as for the list. -o json prints {"release": …} as the list
answered it. A version that is not registered is exit 1 (NOT_FOUND), with the registered versions.`, list.Permission, list.Scope),
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			version := args[0]
			in := map[string]any{"tenantId": c.tenantOf(cmd, list)}
			var versions []string
			for {
				var page struct {
					Releases   []json.RawMessage `json:"releases"`
					NextCursor string            `json:"nextCursor"`
				}
				if err := c.callJSON(cmd.Context(), list.Name, in, &page); err != nil {
					return err
				}
				for _, raw := range page.Releases {
					var r release.Release
					if err := json.Unmarshal(raw, &r); err != nil {
						return fmt.Errorf("%s: unexpected answer: %w", list.Name, err)
					}
					if r.Version != version {
						versions = append(versions, r.Version)
						continue
					}
					if c.output == "json" {
						out, _ := json.Marshal(map[string]json.RawMessage{"release": raw})
						return writeJSON(c.out, out)
					}
					tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
					printRelease(tw, r, false, c.now())
					return tw.Flush()
				}
				if page.NextCursor == "" {
					break
				}
				in["cursor"] = page.NextCursor
			}
			fmt.Fprintf(c.errOut, "bcctl: NOT_FOUND: release %q is not registered (%s)\n", version, registeredText(versions))
			hint := "Versions match exactly (build metadata makes another version): bcctl releases list shows them."
			if trimmed := strings.TrimPrefix(version, "v"); trimmed != version && contains(versions, trimmed) {
				hint = fmt.Sprintf("Versions are SemVer without a v: bcctl releases get %s.", trimmed)
			}
			fmt.Fprintf(c.errOut, "    %s\n", hint)
			return exitCode(exitAPIError)
		},
	}
}

// registeredText names the registered versions, newest first, a few of
// them.
func registeredText(versions []string) string {
	const shown = 5
	switch {
	case len(versions) == 0:
		return "no release is registered"
	case len(versions) > shown:
		return fmt.Sprintf("registered, newest first: %s and %d more", strings.Join(versions[:shown], ", "), len(versions)-shown)
	}
	return "registered, newest first: " + strings.Join(versions, ", ")
}

// releaseTable and releasesTable print releases.register and list.
var (
	releaseTable  = oneTable(func(w io.Writer, a api.RegisterResult, now time.Time) { printRelease(w, a.Release, a.Replayed, now) })
	releasesTable = listTable(func(a api.ListReleasesResult) []release.Release { return a.Releases }, printReleases)
)

func printRelease(w io.Writer, r release.Release, replayed bool, now time.Time) {
	fmt.Fprintf(w, "version\t%s\nsequence\t%d\nexpires\t%s\nmanifest digest\t%s\nsigners\t%s\nregistered\t%s by %s/%s\n",
		r.Version, r.Sequence, expiresText(r, now), r.ManifestDigest, strings.Join(r.Signers, ", "), stamp(r.RegisteredAt), r.RegisteredBy.TenantID, r.RegisteredBy.Principal)
	if replayed {
		fmt.Fprintln(w, "replayed\tyes: this version was already recorded with this sequence")
	}
	fmt.Fprintln(w, "\nPLATFORM\tSIZE\tSHA256\tURL")
	for _, b := range r.Binaries {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", b.Platform, b.Size, b.SHA256, b.URL)
	}
}

// printReleases lists releases, one row each.
func printReleases(w io.Writer, rs []release.Release, now time.Time) {
	fmt.Fprintln(w, "VERSION\tSEQUENCE\tPLATFORMS\tEXPIRES\tREGISTERED\tBY")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", r.Version, r.Sequence, platforms(r), expiresText(r, now), stamp(r.RegisteredAt), r.RegisteredBy.Principal)
	}
}

// expiresText is a release's expiry: its time ("(expired)" once passed:
// rollouts.create refuses it, nodes refuse to install it), or "never".
func expiresText(r release.Release, now time.Time) string {
	switch {
	case r.Expires == nil:
		return "never"
	case !now.Before(*r.Expires):
		return stamp(*r.Expires) + " (expired)"
	}
	return stamp(*r.Expires)
}

func platforms(r release.Release) string {
	var ps []string
	for _, b := range r.Binaries {
		ps = append(ps, b.Platform)
	}
	return strings.Join(ps, ", ")
}
