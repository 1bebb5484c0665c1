package stack

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo/schema"
)

// ReconcilerActions are the reconciler's actions, declared beside the
// catalog (it is not an API method), and where its Query reads.
var (
	ReconcilerActions = api.ReconcilerActions
	ReconcilerIndexes = api.ReconcilerIndexes
)

// Access is what one function's role may do, derived from its declared
// actions (least privilege).
type Access struct {
	TableItem  []string // item actions on the table itself
	TableQuery []string // Query/Scan: only where Indexes says
	// Indexes are the secondary indexes Query may read, or api.BaseTable for
	// the table itself (the catalog's Indexes).
	Indexes []string
	// TableKey is what the role may ask of the table's KMS key, only through
	// DynamoDB: decrypt to read, and encrypt to write.
	TableKey  []string
	Signing   []string // KMS actions on the release signing key
	LogKey    []string // KMS actions on the release log key (kms:Sign, and the public key it needs)
	CursorKey []string // Secrets Manager actions on the cursor key secret
}

// Writes reports whether the actions change table items.
func (a Access) Writes() bool {
	return slices.ContainsFunc(a.TableItem, func(s string) bool { return tableWrites[s] })
}

// tableWrites are DynamoDB actions that change items.
var tableWrites = map[string]bool{
	"dynamodb:PutItem": true, "dynamodb:UpdateItem": true, "dynamodb:DeleteItem": true,
	"dynamodb:BatchWriteItem": true, "dynamodb:TransactWriteItems": true,
}

// tableReadsOnIndexes are the DynamoDB actions that may target an index.
var tableReadsOnIndexes = map[string]bool{"dynamodb:Query": true, "dynamodb:Scan": true}

// The table key actions mirror what CDK's own table grants ask for a
// customer-managed key: decrypt (and describe) to read, encrypt to write.
var (
	tableKeyRead  = []string{"kms:Decrypt", "kms:DescribeKey"}
	tableKeyWrite = []string{"kms:Encrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*"}
)

// AccessFor splits declared actions into what they apply to. An action of a
// service the stack does not know where to apply is an error, and so is a
// Query without Indexes (or Indexes without a Query), or an index the table
// does not have: the catalog and the infrastructure must be made to agree,
// not silently widened.
func AccessFor(fn string, actions []string, indexes []string) (Access, error) {
	a := Access{Indexes: indexes}
	known := tableIndexes()
	for _, ix := range indexes {
		if !known[ix] {
			return a, fmt.Errorf("function %s: index %q is not in the table definition (shared/dynamo/schema)", fn, ix)
		}
	}
	seen := map[string]bool{}
	for _, act := range actions {
		if seen[act] {
			continue
		}
		seen[act] = true
		service, name, ok := strings.Cut(act, ":")
		if !ok || name == "" || strings.Contains(name, "*") {
			return a, fmt.Errorf("function %s: action %q is not a single AWS action", fn, act)
		}
		switch {
		case service == "dynamodb" && tableReadsOnIndexes[act]:
			a.TableQuery = append(a.TableQuery, act)
		case service == "dynamodb":
			a.TableItem = append(a.TableItem, act)
		case act == api.ReadsReleaseLogKey:
			// releases.log's verifier key: the log key's public half alone.
			a.LogKey = append(a.LogKey, "kms:GetPublicKey")
		case act == api.SignsReleaseLog:
			// Checkpoints of the release log: its own key, never the release key.
			a.LogKey = append(a.LogKey, act, "kms:GetPublicKey")
		case service == "kms" && (strings.HasPrefix(name, "Create") || strings.HasPrefix(name, "Delete") || strings.HasPrefix(name, "Schedule")):
			// Releases are signed offline by an operator with bcctl sign; no function administers keys.
			return a, fmt.Errorf("function %s: %s is never granted to a function", fn, act)
		case service == "kms":
			a.Signing = append(a.Signing, act)
		case act == api.ReadsCursorKey:
			a.CursorKey = append(a.CursorKey, act)
		default:
			return a, fmt.Errorf("function %s: action %q: the stack does not know which resource it applies to", fn, act)
		}
	}
	if (len(a.TableQuery) > 0) != (len(indexes) > 0) {
		return a, fmt.Errorf("function %s: Query/Scan %v on indexes %v: a Query needs the catalog's Indexes, and Indexes a Query", fn, a.TableQuery, indexes)
	}
	if len(a.TableItem)+len(a.TableQuery) > 0 {
		a.TableKey = append(a.TableKey, tableKeyRead...)
		if a.Writes() {
			a.TableKey = append(a.TableKey, tableKeyWrite...)
		}
	}
	return a, nil
}

// tableIndexes are the names Indexes may hold: the definition's indexes and
// api.BaseTable.
func tableIndexes() map[string]bool {
	known := map[string]bool{api.BaseTable: true}
	for _, ix := range schema.IndexNames() {
		known[ix] = true
	}
	return known
}

// Function is one Lambda of the stack.
type Function struct {
	Name    string      // functions/<Name>, build/<Name>/bootstrap
	Method  *api.Method // nil for the reconciler and the console
	Access  Access
	Memory  float64 // MB
	Timeout float64 // seconds
}

// Sizing per kind of function. Reads are a query or two and JSON; mutations
// make a few sequential conditional writes (and releases.register verifies
// signatures), so they get more CPU (Lambda CPU scales with memory) and time.
// API Gateway's HTTP API integrations time out at 30 s regardless.
var (
	readSizing = [2]float64{256, 5}
	// A mutation's flow stops writing at capacity.FlowDeadline, which the
	// create's leases and the release's timeout are reckoned from.
	mutationSizing = [2]float64{512, capacity.FlowDeadline.Seconds()}
	// One bounded pass a minute: the timeout stays below the period so a
	// pass ends before the next tick (and reserved concurrency 1 keeps two
	// from ever running at once).
	reconcilerSizing = [2]float64{512, 50}
)

// ReconcilerPeriod is how often EventBridge starts a pass (seconds).
const ReconcilerPeriod = 60

// Functions is every function of the stack, built from the catalog.
func Functions() ([]Function, error) {
	var out []Function
	for _, m := range api.Catalog {
		var size [2]float64
		switch m.Kind {
		case api.Read:
			size = readSizing
		case api.Mutation:
			size = mutationSizing
		default:
			return nil, fmt.Errorf("method %s: unknown kind %q", m.Name, m.Kind)
		}
		acc, err := AccessFor(m.FunctionName(), m.Actions, m.Indexes)
		if err != nil {
			return nil, err
		}
		if m.Kind == api.Read && acc.Writes() {
			return nil, fmt.Errorf("method %s is a read but declares write actions %v", m.Name, acc.TableItem)
		}
		out = append(out, Function{Name: m.FunctionName(), Method: m, Access: acc, Memory: size[0], Timeout: size[1]})
	}
	con, err := consoleFunction()
	if err != nil {
		return nil, err
	}
	out = append(out, con)
	acc, err := AccessFor(api.ReconcilerFunction, ReconcilerActions, ReconcilerIndexes)
	if err != nil {
		return nil, err
	}
	return append(out, Function{Name: api.ReconcilerFunction, Access: acc,
		Memory: reconcilerSizing[0], Timeout: reconcilerSizing[1]}), nil
}

// consoleSizing: a page calls several methods one after another (a pool's
// month is a usage call a day), so it gets a mutation's CPU and the most
// time API Gateway waits for.
var consoleSizing = [2]float64{1024, 29}

// consoleFunction is the web console: its role may do what the methods
// it calls in process may do (their Actions and Indexes), and nothing else.
func consoleFunction() (Function, error) {
	actions, indexes, err := ConsoleActions()
	if err != nil {
		return Function{}, err
	}
	acc, err := AccessFor(api.ConsoleFunction, actions, indexes)
	if err != nil {
		return Function{}, err
	}
	return Function{Name: api.ConsoleFunction, Access: acc, Memory: consoleSizing[0], Timeout: consoleSizing[1]}, nil
}

// ConsoleActions are the union of the Actions and Indexes of the methods
// the console calls.
func ConsoleActions() (actions, indexes []string, err error) {
	for _, name := range api.ConsoleMethods {
		m := api.Lookup(name)
		if m == nil {
			return nil, nil, fmt.Errorf("the console calls %s, which is not in the catalog", name)
		}
		for _, a := range m.Actions {
			if !slices.Contains(actions, a) {
				actions = append(actions, a)
			}
		}
		for _, ix := range m.Indexes {
			if !slices.Contains(indexes, ix) {
				indexes = append(indexes, ix)
			}
		}
	}
	return actions, indexes, nil
}

// IsConsole reports whether f is the web console's function.
func (f Function) IsConsole() bool { return f.Name == api.ConsoleFunction }

// IsReconciler reports whether f is the scheduled reconciler.
func (f Function) IsReconciler() bool { return f.Name == api.ReconcilerFunction }

// VerifiesReleases reports whether the function reads the release signing
// key, and so gets the release pins, threshold and key ids.
func (f Function) VerifiesReleases() bool {
	return slices.Contains(f.Access.Signing, "kms:GetPublicKey")
}
