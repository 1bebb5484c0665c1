// Command bcctl is the Better Compute CLI: every API method as a resource verb
// (bcctl reservations create --pool p --resource gpu.h100 --count 4 --end +2h),
// generated from the method catalog, plus the generic `bcctl call`, a pool's
// chart (bcctl pools show), a reservation's life as it happens (bcctl reservations
// watch), a node registered from its key file (bcctl nodes register), release
// keys and signing, and the invariant checker.
//
// Exit codes: 0 success; 1 the API answered an error (or `check` found
// violations, or `watch` ended in a state other than the one waited for);
// 2 a bad command line; 3 the API (or, for check, DynamoDB) could not be
// reached, or the URL is not the API's; 4 a local failure (a file, a key, a
// signature, a missing table).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/apierr"
	"github.com/bettercompute/control-plane/shared/client"
	"github.com/bettercompute/control-plane/shared/conc"
)

// Exit codes (documented in the package comment and README).
const (
	exitOK          = 0
	exitAPIError    = 1
	exitUsage       = 2
	exitUnreachable = 3
	exitLocal       = 4
)

func main() {
	c := &cli{out: os.Stdout, errOut: os.Stderr, getenv: os.Getenv, now: time.Now, sleep: conc.Sleep, prog: os.Args[0]}
	os.Exit(c.exec(context.Background(), os.Args[1:]))
}

// cli is one invocation: where it writes, what it reads from the
// environment, and its global flags.
type cli struct {
	out, errOut io.Writer
	getenv      func(string) string
	now         func() time.Time
	sleep       func(context.Context, time.Duration) error

	apiURL, token, tenant, output string
	client                        *client.Client
	// called is the method bcctl call sends (nil for a verb): its errors'
	// hints say FIELD=value, not a verb's flags.
	called *api.Method
	// prog is how bcctl was run (bin/bcctl, bcctl): the commands it prints
	// for the same shell to run start with it ("" is bcctl).
	prog string
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) int {
	c := &cli{out: out, errOut: errOut, getenv: getenv, now: time.Now, sleep: conc.Sleep}
	return c.exec(ctx, args)
}

func (c *cli) exec(ctx context.Context, args []string) int {
	root := c.root()
	root.SetArgs(args)
	root.SetOut(c.out)
	root.SetErr(c.errOut)
	err := root.ExecuteContext(ctx)
	return c.report(err)
}

// bearer is the token to send: --token, else $BC_TOKEN, else the local
// gateway's dev:admin.
func (c *cli) bearer() string {
	if c.token != "" {
		return c.token
	}
	return c.envOr("BC_TOKEN", "dev:admin")
}

func (c *cli) envOr(key, def string) string {
	if v := c.getenv(key); v != "" {
		return v
	}
	return def
}

func (c *cli) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "bcctl",
		Short: "The Better Compute CLI",
		Long: `bcctl calls the Better Compute API: every method as <resource> <verb> (see "bcctl <resource> --help"):
releases, pools and their quotas, reservations, and the nodes of a pool (register, cordon, list);
plus release signing keys, the invariant checker and shell completion.

Exit codes: 0 success; 1 the API answered an error (or check found violations, or watch ended
in another state than the one waited for); 2 a bad command line; 3 the API (for check: DynamoDB)
could not be reached, or the URL is not the API's; 4 a local failure (a file, a key, a signature,
a missing table).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch c.output {
			case "table", "json":
			default:
				return usageErr(fmt.Errorf("-o must be table or json, not %q", c.output))
			}
			if u, err := url.Parse(c.apiURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageErr(fmt.Errorf("--api-url (or BC_API_URL) %q is not an http(s) URL: write it with its scheme, e.g. http://%s", c.apiURL,
					strings.TrimPrefix(strings.TrimPrefix(c.apiURL, "//"), "://")))
			}
			c.client = client.New(c.apiURL, c.bearer())
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&c.apiURL, "api-url", c.envOr("BC_API_URL", "http://127.0.0.1:8080"), "API base URL ($BC_API_URL)")
	// No default in the flag: --help would print $BC_TOKEN's value.
	pf.StringVar(&c.token, "token", "", "bearer token: a JWT, or dev:<principal> on the local gateway (default $BC_TOKEN, else dev:admin)")
	pf.StringVar(&c.tenant, "tenant", c.getenv("BC_TENANT"), "tenant to act as ($BC_TENANT)")
	pf.StringVarP(&c.output, "output", "o", "table", "output: table or json")
	_ = root.RegisterFlagCompletionFunc("output", fixed("table", "json"))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })

	for _, r := range c.resourceCommands() {
		root.AddCommand(r)
	}
	root.AddCommand(c.callCommand(), c.methodsCommand(), c.checkCommand(),
		c.keygenCommand(), c.pubkeyCommand(), c.signCommand(), c.versionCommand())
	root.Version = buildVersion()
	root.SetVersionTemplate("bcctl {{.Version}}\n")
	root.CompletionOptions.HiddenDefaultCmd = false
	return root
}

// usageError is a bad command line (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErr(err error) error { return usageError{err} }

// localError is a local failure: a file, a key (exit 4).
type localError struct{ err error }

func (e localError) Error() string { return e.err.Error() }
func (e localError) Unwrap() error { return e.err }

func localErr(err error) error {
	if err == nil {
		return nil
	}
	return localError{err}
}

// exitCode ends the process with a code, having printed what it had to.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// unreachable is a transport failure talking to the API, or to DynamoDB
// for check (exit 3).
type unreachable struct {
	url string
	err error
	// dynamo: the endpoint is DynamoDB's (check), not the API's.
	dynamo bool
}

// notTheAPI is an answer without the API's error envelope: the URL serves
// something else, or the API's routes are not under it (exit 3).
type notTheAPI struct {
	url    string
	status int
	body   string
}

func (e notTheAPI) Error() string {
	return fmt.Sprintf("%s answered HTTP %d without an API error (%s)", e.url, e.status, e.body)
}

func (e unreachable) Error() string { return e.err.Error() }

// report prints err as a person should read it and returns the exit code.
func (c *cli) report(err error) int {
	var (
		ae   *apierr.Error
		ue   usageError
		le   localError
		code exitCode
		un   unreachable
		na   notTheAPI
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &un) && un.dynamo:
		fmt.Fprintf(c.errOut, "bcctl: cannot reach DynamoDB at %s: %s\n", un.url, transportCause(un.err))
		fmt.Fprintln(c.errOut, "    check reads the table itself, not the API. Locally: make run (it prints BC_DYNAMODB_ENDPOINT); in AWS: --aws.")
		return exitUnreachable
	case errors.As(err, &un):
		fmt.Fprintf(c.errOut, "bcctl: cannot reach the API at %s: %s\n", un.url, transportCause(un.err))
		fmt.Fprintln(c.errOut, "    Is it running? Locally: make run (it prints the exports); else set BC_API_URL or --api-url.")
		return exitUnreachable
	case errors.As(err, &na):
		fmt.Fprintf(c.errOut, "bcctl: %s\n", na)
		fmt.Fprintf(c.errOut, "    Is %s the API's base URL? It is the URL before /api/compute/... (locally %s), from BC_API_URL or --api-url.\n", c.apiURL, api.LocalServer)
		return exitUnreachable
	case errors.As(err, &ae):
		var fc client.Failed
		var answered apiError
		if errors.As(err, &answered) {
			fc = answered.call
		}
		words := flagWords
		if c.called != nil {
			words = callWords(c.called)
		}
		client.Explain(c.errOut, ae, fc, words)
		var more afterRefusal
		if errors.As(err, &more) {
			fmt.Fprint(c.errOut, more.text)
		}
		return exitAPIError
	case errors.As(err, &ue), isCobraUsage(err):
		msg := strings.TrimRight(err.Error(), "\n")
		// cobra's own suggestion for a mistyped command, on one line.
		if head, names, ok := strings.Cut(msg, "\n\nDid you mean this?\n\t"); ok {
			msg = head + "; did you mean " + strings.ReplaceAll(names, "\n\t", ", ") + "?"
		}
		fmt.Fprintf(c.errOut, "bcctl: %s\n    See bcctl --help, or bcctl <resource> <verb> --help.\n", msg)
		return exitUsage
	case errors.As(err, &le):
		fmt.Fprintf(c.errOut, "bcctl: %s\n", err)
		return exitLocal
	default:
		fmt.Fprintf(c.errOut, "bcctl: %s\n", err)
		return exitLocal
	}
}

// isCobraUsage recognises cobra's own argument errors.
func isCobraUsage(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "unknown command") || strings.HasPrefix(m, "unknown flag") ||
		strings.HasPrefix(m, "unknown shorthand flag") || strings.Contains(m, "arg(s)") ||
		strings.HasPrefix(m, "required flag") || strings.HasPrefix(m, "invalid argument")
}

// transportCause says in words why a connection failed.
func transportCause(err error) string {
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		return "connection refused (nothing listens there)"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer in time"
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return "unknown host " + dns.Name
	}
	return err.Error()
}

// apiError is an API error answer to one call (errors.As finds the
// *apierr.Error in it): the call it answered, for the hint.
type apiError struct {
	err  *apierr.Error
	call client.Failed
}

func (e apiError) Error() string { return e.err.Error() }
func (e apiError) Unwrap() error { return e.err }

// call sends one request and returns the raw answer of a 200, an apiError
// for an API error, or unreachable.
func (c *cli) call(ctx context.Context, method string, body []byte) ([]byte, error) {
	resp, err := c.client.Do(ctx, method, body)
	if err != nil {
		return nil, unreachable{url: c.apiURL, err: err}
	}
	if resp.Status != http.StatusOK {
		var ae *apierr.Error
		if err := client.ErrorOf(resp); errors.As(err, &ae) {
			fc := client.Failed{Method: method}
			_ = json.Unmarshal(body, &fc.Request) // the body bcctl built is JSON; call's may be anything
			return nil, apiError{err: ae, call: fc}
		}
		return nil, notTheAPI{url: c.apiURL, status: resp.Status, body: shortBody(resp.Body)}
	}
	return resp.Body, nil
}

// shortBody is the start of an answer, for a message.
func shortBody(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	if s == "" {
		return "an empty body"
	}
	return s
}

// fixed completes a flag with a fixed list of values.
func fixed(values ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return values, cobra.ShellCompDirectiveNoFileComp
	}
}

// buildVersion is what `bcctl version` and `--version` print: the module
// version and the VCS revision the binary was built from, as the Go
// toolchain stamped them (go install …@v1.2.3: the version; a build in a
// checkout: the revision, "+dirty" with local changes).
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: built without module information)"
	}
	v := bi.Main.Version
	var rev, at string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	out := v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		out += " (" + rev
		if at != "" {
			out += ", " + at
		}
		out += ")"
	}
	return out + " " + bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}

// versionCommand is `bcctl version`: the same line as --version.
func (c *cli) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print bcctl's version (as --version does)",
		Args:  cobra.NoArgs,
		// No API call: no --api-url check either.
		PersistentPreRunE: func(*cobra.Command, []string) error { return nil },
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(c.out, "bcctl "+buildVersion())
			return nil
		},
	}
}
