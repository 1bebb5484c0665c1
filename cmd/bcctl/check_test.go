package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/devstack"
	"github.com/bettercompute/control-plane/shared/dynamo/capacitydb"
)

func TestMain(m *testing.M) { devstack.Main(m) }

func TestCheckCommand(t *testing.T) {
	s := devstack.Shared(t)
	table := devstack.NewTable(t, s)
	store := &capacitydb.Store{DB: s.DynamoDB(), Table: table}
	ctx := context.Background()

	var out bytes.Buffer
	if err := runCheck(ctx, store, table, &out, false); err != nil || !strings.Contains(out.String(), "all capacity invariants hold") {
		t.Fatalf("empty table: %v %q", err, out.String())
	}
	out.Reset()
	if err := runCheck(ctx, store, table, &out, true); err != nil || !strings.Contains(out.String(), `"ok": true`) || !strings.Contains(out.String(), `"violations": []`) {
		t.Fatalf("empty table, -o json: %v %q", err, out.String())
	}
	// A quota charge held for a reservation that does not exist.
	k := capacity.QuotaKey{TenantID: "acme", PoolID: "p1", Resource: "gpu"}
	if err := store.EnsureQuota(ctx, k, 4, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Charge(ctx, k, "ghost", 2, nil, nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err := runCheck(ctx, store, table, &out, false)
	if err != exitCode(exitAPIError) || !strings.Contains(out.String(), ": 2 invariant violations") {
		t.Fatalf("inconsistent table: %v %q", err, out.String())
	}
	// -o json: the same finding, as JSON.
	out.Reset()
	err = runCheck(ctx, store, table, &out, true)
	var got checkResult
	if jerr := json.Unmarshal(out.Bytes(), &got); err != exitCode(exitAPIError) || jerr != nil || got.OK || got.Table != table || len(got.Violations) != 2 || got.Violations[0].Kind == "" {
		t.Fatalf("-o json: %v %v %q", err, jerr, out.String())
	}
}
