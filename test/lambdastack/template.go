package lambdastack

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/bettercompute/control-plane/shared/api"
)

// TimeoutScale is how many times its template's timeout a function gets
// under the emulator (which enforces it, and tells the function). The
// template's 5 s for a read is sized for DynamoDB; here every call goes
// to dynalite on a 2-core machine that may be running two test suites at
// once — pools.availability's 7-day search (174 reads) once took longer
// than 5 s there and was answered 500.
const TimeoutScale = 6

// Spec is one function as the synthesized template defines it.
type Spec struct {
	Name        string
	Variables   map[string]any // Environment.Variables, unresolved
	MemoryMB    int
	TimeoutSec  int
	LogFormat   string // LoggingConfig.LogFormat
	AppLogLevel string // LoggingConfig.ApplicationLogLevel
	Reserved    int    // ReservedConcurrentExecutions (0: none)
}

// Template is the synthesized stack: its functions by name, and the types of
// its resources (to resolve references).
type Template struct {
	Functions map[string]Spec
	types     map[string]string // logical id → resource type
}

// LoadTemplate reads a synthesized template (cdk.out/<stack>.template.json).
func LoadTemplate(path string) (*Template, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lambdastack: template: %w (make synth writes it)", err)
	}
	var doc struct {
		Resources map[string]struct {
			Type       string
			Properties json.RawMessage
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("lambdastack: template %s: %w", path, err)
	}
	t := &Template{Functions: map[string]Spec{}, types: map[string]string{}}
	for id, r := range doc.Resources {
		t.types[id] = r.Type
		if r.Type != "AWS::Lambda::Function" {
			continue
		}
		var p struct {
			Environment                  struct{ Variables map[string]any }
			MemorySize                   json.Number
			Timeout                      json.Number
			ReservedConcurrentExecutions json.Number
			LoggingConfig                struct{ LogFormat, ApplicationLogLevel string }
			Tags                         []struct{ Key, Value string }
		}
		if err := json.Unmarshal(r.Properties, &p); err != nil {
			return nil, fmt.Errorf("lambdastack: template %s: function %s: %w", path, id, err)
		}
		s := Spec{Variables: p.Environment.Variables, LogFormat: p.LoggingConfig.LogFormat,
			AppLogLevel: p.LoggingConfig.ApplicationLogLevel}
		for _, tag := range p.Tags {
			if tag.Key == api.TagFunction {
				s.Name = tag.Value
			}
		}
		mem, _ := strconv.Atoi(p.MemorySize.String())
		timeout, _ := strconv.Atoi(p.Timeout.String())
		reserved, _ := strconv.Atoi(p.ReservedConcurrentExecutions.String())
		s.MemoryMB, s.TimeoutSec, s.Reserved = mem, timeout, reserved
		if s.Name == "" {
			return nil, fmt.Errorf("lambdastack: function %s has no %s tag", id, api.TagFunction)
		}
		t.Functions[s.Name] = s
	}
	if len(t.Functions) == 0 {
		return nil, fmt.Errorf("lambdastack: template %s defines no function", path)
	}
	return t, nil
}

// Names are the functions' names, sorted.
func (t *Template) Names() []string {
	out := make([]string, 0, len(t.Functions))
	for n := range t.Functions {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Local is what the references of a deployed template stand for here.
type Local struct {
	Table           string // the DynamoDB table (dynalite)
	SigningKeyID    string // the release signing key (local-kms)
	LogKeyID        string // the release log key (local-kms)
	CursorSecretARN string // the cursor key secret (secretsapi)
	// IAMURL replaces the template's BC_IAM_URL (a remote Better IAM); when
	// empty, PolicyFile replaces it as BC_POLICY_FILE (what the CDK app sets
	// with -c policyFile=…).
	IAMURL     string
	PolicyFile string
	// Extra variables only a local run needs (endpoints, dummy credentials).
	Extra map[string]string
}

// Environment is the function's environment as Lambda would set it from the
// template, its references resolved to local resources: the variables the
// CDK app gave it, the Lambda runtime's own (name, memory, timeout, log
// format and level), then Local.Extra. A reference to anything else is an
// error, so a new kind of variable cannot slip through unresolved.
func (t *Template) Environment(name string, l Local) ([]string, error) {
	s, ok := t.Functions[name]
	if !ok {
		return nil, fmt.Errorf("lambdastack: no function %s in the template", name)
	}
	env := map[string]string{}
	for k, v := range s.Variables {
		switch x := v.(type) {
		case string:
			env[k] = x
		case map[string]any:
			ref, _ := x["Ref"].(string)
			switch t.types[ref] {
			case "AWS::DynamoDB::Table":
				env[k] = l.Table
			case "AWS::KMS::Key":
				env[k] = l.SigningKeyID
				if strings.HasPrefix(ref, "ReleaseLogKey") {
					env[k] = l.LogKeyID
				}
			case "AWS::SecretsManager::Secret":
				env[k] = l.CursorSecretARN
			default:
				return nil, fmt.Errorf("lambdastack: %s: %s = %v: no local stand-in for this reference", name, k, v)
			}
		default:
			return nil, fmt.Errorf("lambdastack: %s: %s = %v (%T)", name, k, v, v)
		}
	}
	if _, ok := env["BC_IAM_URL"]; ok {
		if l.IAMURL != "" {
			env["BC_IAM_URL"] = l.IAMURL
		} else {
			delete(env, "BC_IAM_URL")
			env["BC_POLICY_FILE"] = l.PolicyFile
		}
	}
	// What Lambda sets for every function (a custom runtime reads the log
	// format and level from these); the timeout scaled (TimeoutScale).
	env["AWS_LAMBDA_FUNCTION_NAME"] = name
	env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = strconv.Itoa(s.MemoryMB)
	env["AWS_LAMBDA_FUNCTION_TIMEOUT"] = strconv.Itoa(s.TimeoutSec * TimeoutScale)
	env["AWS_LAMBDA_FUNCTION_VERSION"] = "$LATEST"
	env["_HANDLER"] = "bootstrap"
	if s.LogFormat != "" {
		env["AWS_LAMBDA_LOG_FORMAT"] = s.LogFormat
	}
	if s.AppLogLevel != "" {
		env["AWS_LAMBDA_LOG_LEVEL"] = s.AppLogLevel
	}
	for k, v := range l.Extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}
