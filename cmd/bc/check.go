package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

// check reads a whole table and reports every broken capacity invariant
// (SPEC §4.4); it exits 1 when there is any. Run it while no request or
// reconciler pass is in flight.
func check(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	table := fs.String("table", envOr("BC_TABLE", "better-compute"), "table name")
	endpoint := fs.String("endpoint", os.Getenv("BC_DYNAMODB_ENDPOINT"), "DynamoDB endpoint (the local stack's dynalite); empty: AWS")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
	cfg, err := awsConfig(ctx, *endpoint != "")
	if err != nil {
		return err
	}
	return runCheck(ctx, &dynamo.Capacity{DB: dynamo.NewClient(cfg, *endpoint), Table: *table}, *table, os.Stdout)
}

func runCheck(ctx context.Context, r capacity.SnapshotReader, table string, out io.Writer) error {
	vs, err := capacity.Check(ctx, r)
	if err != nil {
		return err
	}
	for _, v := range vs {
		fmt.Fprintln(out, v)
	}
	if len(vs) > 0 {
		fmt.Fprintf(out, "%s: %d invariant violations\n", table, len(vs))
		return exitError(1)
	}
	fmt.Fprintf(out, "%s: all capacity invariants hold\n", table)
	return nil
}

// awsConfig is the SDK's default chain (profiles, SSO, …); against a local
// server any credentials do.
func awsConfig(ctx context.Context, local bool) (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(envOr("AWS_REGION", "us-east-1"))}
	if local && os.Getenv("AWS_ACCESS_KEY_ID") == "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	return awsconfig.LoadDefaultConfig(ctx, opts...)
}
