package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/spf13/cobra"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
	"github.com/bettercompute/control-plane/shared/strictjson"
)

// checkCommand reads a whole table and reports every broken capacity
// invariant (docs/capacity.md); it exits 1 when there is any. Run it while no
// request or reconciler pass is in flight.
func (c *cli) checkCommand() *cobra.Command {
	var table, endpoint string
	var inAWS bool
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check the capacity invariants of a table (exit 1 on any violation)",
		Long: `Reads the whole table (a consistent scan: an operator's tool, never run it on a busy production
table) and reports every broken capacity invariant: quota used against live reservations, charges
in flight, node-hour entries against reservations, double bookings, topology, index entries without an item. Against the local
stack set BC_DYNAMODB_ENDPOINT (make run prints it) or --dynamodb-endpoint; against AWS pass --aws
(credentials from the usual AWS chain). -o json prints {"table", "ok", "violations": [{"kind",
"subject", "detail"}]}. It reads DynamoDB, never the API: a missing table exits 4, an unreachable
endpoint 3.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if endpoint == "" && !inAWS {
				return usageErr(errors.New("check: no DynamoDB endpoint: set BC_DYNAMODB_ENDPOINT or --dynamodb-endpoint (make run prints it), or pass --aws to read a table in AWS"))
			}
			ctx := cmd.Context()
			cfg, err := c.awsConfig(ctx, endpoint)
			if err != nil {
				return localErr(err)
			}
			err = runCheck(ctx, &capacitydb.Store{DB: dynamo.NewClient(cfg, endpoint), Table: table}, table, c.out, c.output == "json")
			var missing *types.ResourceNotFoundException
			switch {
			case err == nil, errors.As(err, new(exitCode)):
				return err
			case errors.As(err, &missing):
				return localErr(fmt.Errorf("check: there is no table %q at %s (make run creates %q; --table or BC_TABLE names the table)",
					table, endpointOr(endpoint), "better-compute"))
			}
			return unreachable{url: endpointOr(endpoint), err: err, dynamo: true}
		},
	}
	cmd.Flags().StringVar(&table, "table", c.envOr("BC_TABLE", "better-compute"), "table name ($BC_TABLE)")
	cmd.Flags().StringVar(&endpoint, "dynamodb-endpoint", c.getenv("BC_DYNAMODB_ENDPOINT"), "DynamoDB endpoint: the local stack's ($BC_DYNAMODB_ENDPOINT)")
	cmd.Flags().BoolVar(&inAWS, "aws", false, "read the table in AWS (no endpoint)")
	return cmd
}

func endpointOr(e string) string {
	if e == "" {
		return "AWS DynamoDB"
	}
	return e
}

// checkResult is check's -o json answer.
type checkResult struct {
	Table      string               `json:"table"`
	OK         bool                 `json:"ok"`
	Violations []capacity.Violation `json:"violations"`
}

func runCheck(ctx context.Context, r capacity.SnapshotReader, table string, out io.Writer, asJSON bool) error {
	vs, err := capacity.Check(ctx, r)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checkResult{Table: table, OK: len(vs) == 0, Violations: append([]capacity.Violation{}, vs...)}); err != nil {
			return err
		}
		if len(vs) > 0 {
			return exitCode(exitAPIError)
		}
		return nil
	}
	for _, v := range vs {
		fmt.Fprintln(out, v)
	}
	if len(vs) > 0 {
		fmt.Fprintf(out, "%s: %s\n", table, strictjson.Plural(len(vs), "invariant violation"))
		return exitCode(exitAPIError)
	}
	fmt.Fprintf(out, "%s: all capacity invariants hold\n", table)
	return nil
}

// awsConfig is the SDK's default chain (profiles, SSO, …) in AWS_REGION
// (default us-east-1); against a local server (endpoint set) any
// credentials do when AWS_ACCESS_KEY_ID is unset.
func (c *cli) awsConfig(ctx context.Context, endpoint string) (aws.Config, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRegion(c.envOr("AWS_REGION", "us-east-1"))}
	if endpoint != "" && c.getenv("AWS_ACCESS_KEY_ID") == "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	return awsconfig.LoadDefaultConfig(ctx, opts...)
}
