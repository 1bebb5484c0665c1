// Command benchdoc keeps measured numbers in one place (make bench):
//
//	benchdoc run -out docs/bench/results.txt -- go test -run '^$' -bench . ./...
//	    runs the command, printing its output and writing it to -out behind
//	    a header (date, commit, Go, CPU, server versions) and a trailer
//	    (how long it took); -out is replaced only when the command succeeds.
//	benchdoc doc [-results docs/bench/results.txt] [-doc docs/performance.md] [-check]
//	    makes the document's generated blocks anew from the results file
//	    (see Render); -check only reports whether they are up to date.
//
// A test fails when docs/performance.md's blocks differ from what the
// committed results file generates, so no number there is typed by hand.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "doc":
		err = docCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchdoc:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: benchdoc run -out FILE -- COMMAND…\n       benchdoc doc [-results FILE] [-doc FILE] [-check]")
	os.Exit(2)
}

func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	out := fs.String("out", "docs/bench/results.txt", "results file")
	_ = fs.Parse(args)
	cmdline := fs.Args()
	if len(cmdline) == 0 {
		return errors.New("run: no command after --")
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	partial := *out + ".partial"
	f, err := os.Create(partial)
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	fmt.Fprint(f, runHeader(start, cmdline))
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdout = io.MultiWriter(os.Stdout, f)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w (its output so far: %s)", strings.Join(cmdline, " "), err, partial)
	}
	took := time.Since(start).Round(time.Second)
	fmt.Fprintf(f, "# took: %s\n", took)
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("benchdoc: wrote %s (%s)\n", *out, took)
	return os.Rename(partial, *out)
}

// runHeader says when, where and with what the results were measured.
func runHeader(now time.Time, cmdline []string) string {
	commit := strings.TrimSpace(output("git", "rev-parse", "--short=12", "HEAD"))
	if strings.TrimSpace(output("git", "status", "--porcelain", "--untracked-files=no")) != "" {
		commit += " with uncommitted changes"
	}
	var b strings.Builder
	line := func(k, v string) {
		if v = strings.TrimSpace(v); v != "" {
			fmt.Fprintf(&b, "# %s: %s\n", k, v)
		}
	}
	b.WriteString("# Written by `make bench` (cmd/benchdoc): the raw `go test -bench` output below.\n")
	line("date", now.UTC().Format("2006-01-02 15:04 UTC"))
	line("commit", commit)
	line("go", runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	line("cpu", cpu())
	line("gomaxprocs", fmt.Sprint(runtime.GOMAXPROCS(0)))
	line("dynalite", jsonVersion("node_modules/dynalite/package.json")+" on Node "+strings.TrimPrefix(strings.TrimSpace(output("node", "--version")), "v"))
	line("local-kms", localKMSVersion())
	line("command", strings.Join(cmdline, " "))
	return b.String()
}

// cpu is the CPU model, core count and memory of this machine (Linux).
func cpu() string {
	model := ""
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for l := range strings.Lines(string(data)) {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	s := fmt.Sprintf("%s, %d cores", model, runtime.NumCPU())
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(data), "MemTotal: %d kB", &kb); err == nil {
			s += fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return strings.TrimPrefix(s, ", ")
}

func jsonVersion(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	_, rest, ok := bytes.Cut(data, []byte(`"version"`))
	if !ok {
		return ""
	}
	f := strings.Split(string(rest), `"`)
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// localKMSVersion reads the pinned version from the tool's install path
// (.tools/bin/local-kms → ../local-kms@VERSION-loopback/local-kms: the
// Makefile's build bound to 127.0.0.1).
func localKMSVersion() string {
	target, err := os.Readlink(".tools/bin/local-kms")
	if err != nil {
		return ""
	}
	_, v, _ := strings.Cut(filepath.Dir(target), "@")
	return strings.TrimSuffix(v, "-loopback")
}

func output(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

func docCmd(args []string) error {
	fs := flag.NewFlagSet("doc", flag.ExitOnError)
	results := fs.String("results", "docs/bench/results.txt", "results file")
	doc := fs.String("doc", "docs/performance.md", "document with generated blocks")
	check := fs.Bool("check", false, "only report whether the document is up to date")
	_ = fs.Parse(args)
	want, have, err := generate(*results, *doc)
	if err != nil {
		return err
	}
	if want == have {
		return nil
	}
	if *check {
		return fmt.Errorf("%s is not what %s generates: run `go run ./cmd/benchdoc doc`", *doc, *results)
	}
	fmt.Println("benchdoc: wrote", *doc)
	return os.WriteFile(*doc, []byte(want), 0o644)
}

// generate returns the document as the results file makes it and as it is.
func generate(resultsPath, docPath string) (want, have string, err error) {
	f, err := os.Open(resultsPath)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	res, err := ParseResults(f)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", resultsPath, err)
	}
	data, err := os.ReadFile(docPath)
	if err != nil {
		return "", "", err
	}
	link, err := filepath.Rel(filepath.Dir(docPath), resultsPath)
	if err != nil {
		return "", "", err
	}
	dir := filepath.Dir(resultsPath)
	want, err = RenderWith(string(data), func(file string) (*Results, string, error) {
		if file == "" {
			return res, filepath.ToSlash(link), nil
		}
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		r, err := ParseResults(f)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", file, err)
		}
		l, err := filepath.Rel(filepath.Dir(docPath), filepath.Join(dir, file))
		return r, filepath.ToSlash(l), err
	})
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", docPath, err)
	}
	return want, string(data), nil
}
