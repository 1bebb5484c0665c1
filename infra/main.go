// Command infra is the Better Compute CDK app. cdk.json builds it to
// build/infra-app and runs that binary; see docs/infrastructure.md.
package main

import (
	"fmt"
	"os"

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
