// Command infra is the Better Compute CDK app. cdk.json builds it to
// build/infra-app and runs that binary; see docs/infrastructure.md.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/bettercompute/control-plane/infra/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		jsii.Close()
		os.Exit(1)
	}
	jsii.Close()
}

func run() error {
	app := awscdk.NewApp(&awscdk.AppProps{StackTraces: jsii.Bool(false)})
	cfg, err := stack.ConfigFrom(func(key string) any { return app.Node().TryGetContext(jsii.String(key)) })
	if err != nil {
		return err
	}
	// make deploy says it deploys (-c deploying=true): the placeholders
	// cdk.json ships for synth deploy an API no token or decision passes.
	if d := app.Node().TryGetContext(jsii.String("deploying")); d == "true" || d == true {
		if err := deployable(cfg); err != nil {
			return err
		}
	}
	if missing := stack.MissingAssets(cfg.AssetRoot); cfg.Placeholders && len(missing) > 0 {
		dir, err := os.MkdirTemp("", "bc-placeholder-assets-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir) // synth has copied the assets into the output folder
		if err := stack.WritePlaceholders(dir); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "infra: %d of the function bootstraps are missing under %s: synthesizing with placeholders (not deployable)\n",
			len(missing), cfg.AssetRoot)
		cfg.AssetRoot = dir
	}
	if _, err := stack.New(app, cfg, &awscdk.StackProps{Env: env()}); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

// env pins the stack to the account and region the CLI resolved, if any;
// without credentials (make synth) the stack stays environment-agnostic.
func env() *awscdk.Environment {
	account, region := os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION")
	if account == "" || region == "" {
		return nil
	}
	return &awscdk.Environment{Account: jsii.String(account), Region: jsii.String(region)}
}

// placeholders are cdk.json's stand-ins, which synth takes and a deployment
// must replace.
var placeholders = map[string]bool{"https://auth.example.com/": true, "https://iam.example.com": true}

// deployable refuses a deployment whose identity provider or Better IAM is a
// placeholder or missing: every call would be 401, or UNAVAILABLE.
func deployable(cfg stack.Config) error {
	var bad []string
	if cfg.JWTIssuer == "" || placeholders[cfg.JWTIssuer] {
		bad = append(bad, fmt.Sprintf("jwtIssuer is %q: give your identity provider's issuer (-c jwtIssuer=https://…)", cfg.JWTIssuer))
	}
	if cfg.PolicyFile == "" && (cfg.IAMURL == "" || placeholders[cfg.IAMURL]) {
		bad = append(bad, fmt.Sprintf("iamUrl is %q: give your Better IAM service (-c iamUrl=https://…)", cfg.IAMURL))
	}
	if len(bad) > 0 {
		return fmt.Errorf("infra: refusing to deploy:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}
