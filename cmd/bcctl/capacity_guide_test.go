package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/test/teststack"
)

// docs/capacity.md's "When can I get it?" runs as a newcomer runs it: its
// sh block line by line in bash (bin/bcctl built), the line it says is
// refused refused with the first window that fits, then the command the
// availability answer ends with — which books it. The refusal and the
// answer name the same command, and the outputs the page shows are what
// the commands print, times and ids aside.
func TestCapacityGuideWalk(t *testing.T) {
	root, err := devstack.Root()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/capacity.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)[strings.Index(string(doc), "## When can I get it?"):]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	blocks := fencedBlocks(section)
	if len(blocks) < 3 || blocks[0].lang != "sh" {
		t.Fatalf("want the sh block and the two outputs it shows, got %d blocks", len(blocks))
	}
	st := teststack.Start(t)
	bin := t.TempDir()
	bcctl := filepath.Join(bin, "bcctl")
	if out, err := exec.Command("go", "build", "-o", bcctl, filepath.Join(root, "cmd/bcctl")).CombinedOutput(); err != nil {
		t.Fatalf("go build bcctl: %v\n%s", err, out)
	}
	env := append(os.Environ(), "BC_API_URL="+st.URL, "BC_TOKEN=dev:admin", "BC_TENANT=acme")
	sh := func(line string, want int) (string, string) {
		t.Helper()
		cmd := exec.Command("bash", "-c", strings.ReplaceAll(line, "bin/bcctl", bcctl))
		cmd.Dir, cmd.Env = root, env
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != want {
			t.Fatalf("%s: exit %d, want %d\n%s%s", line, code, want, out.String(), errOut.String())
		}
		// The commands bcctl prints start as it was run.
		return strings.ReplaceAll(out.String(), bcctl, "bin/bcctl"), strings.ReplaceAll(errOut.String(), bcctl, "bin/bcctl")
	}
	var refusal, answer string
	for line := range strings.Lines(blocks[0].body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		command, comment, _ := strings.Cut(line, "#")
		switch {
		case strings.Contains(comment, "refused"):
			_, refusal = sh(command, exitAPIError)
		default:
			answer, _ = sh(command, 0)
		}
	}
	book := lastLine(t, refusal, "    Book it: ")
	if first := lastLine(t, answer, "To book the first: "); first != book {
		t.Errorf("the answer books with\n%s\nthe refusal with\n%s", first, book)
	}
	if out, _ := sh(book, 0); !strings.Contains(out, "state        placed") || !strings.Contains(out, "gpu.h100-node-[0-1] (2)") {
		t.Errorf("%s:\n%s", book, out)
	}
	for i, got := range []string{refusal, answer} {
		if want := blocks[i+1].body; guideText(got) != guideText(want) {
			t.Errorf("the page shows\n%s\nthe command printed\n%s", want, got)
		}
	}
}

// guideText is bcctl's output as the guide shows it: times and ids
// as placeholders, the table's columns as single spaces.
func guideText(s string) string {
	s = regexp.MustCompile(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z`).ReplaceAllString(s, "<time>")
	s = regexp.MustCompile(`reservationId=\S+`).ReplaceAllString(s, "reservationId=<id>")
	s = clocks.ReplaceAllString(stamps.ReplaceAllString(s, "<time>"), "<when>")
	return strings.Join(strings.Fields(s), " ")
}

type mdBlock struct{ lang, body string }

// fencedBlocks are the fenced blocks of a markdown text, in order.
func fencedBlocks(s string) []mdBlock {
	var out []mdBlock
	var cur *mdBlock
	var body strings.Builder
	for line := range strings.Lines(s) {
		trimmed := strings.TrimRight(line, "\n")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &mdBlock{lang: strings.TrimPrefix(trimmed, "```")}
			body.Reset()
		case cur != nil && trimmed == "```":
			cur.body = body.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line)
		}
	}
	return out
}
